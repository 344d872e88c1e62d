# frozen_string_literal: true

require "socket"
require "tmpdir"
require "timeout"
require "fileutils"

# A real Redis for the Sidekiq tests: Debian's redis-server (script/test installs it), on a free
# loopback port with its own temporary directory, nothing persisted, stopped (and its directory
# removed) by #stop. #kill and #restart play a Redis that goes away and comes back on the same port.
class RedisServer
  BOOT_TIMEOUT = 10

  attr_reader :port, :dir

  def self.available? = system("command -v redis-server >/dev/null 2>&1")

  def initialize
    @dir = Dir.mktmpdir("gvlscope-redis")
    @port = free_port
    start
  end

  def url = "redis://127.0.0.1:#{@port}/0"

  def start
    @pid = Process.spawn("redis-server", "--port", @port.to_s, "--bind", "127.0.0.1", "--dir", @dir, "--save", "",
                         "--appendonly", "no", "--daemonize", "no", "--logfile", File.join(@dir, "redis.log"),
                         out: File::NULL, err: File::NULL, pgroup: true)
    deadline = clock + BOOT_TIMEOUT
    until ping
      raise "redis-server did not answer on port #{@port} in #{BOOT_TIMEOUT} s: #{log}" if clock > deadline
      raise "redis-server exited: #{log}" if Process.waitpid(@pid, Process::WNOHANG)

      sleep 0.02
    end
    self
  end

  # Gone at once, as a crashed server or a network partition would be.
  def kill
    Process.kill(:KILL, @pid)
    Process.wait(@pid)
    @pid = nil
  end

  alias restart start

  def stop
    if @pid
      Process.kill(:TERM, @pid)
      Timeout.timeout(10) { Process.wait(@pid) }
    end
  rescue Timeout::Error
    Process.kill(:KILL, @pid)
    Process.wait(@pid)
  rescue Errno::ESRCH, Errno::ECHILD
    nil
  ensure
    @pid = nil
    FileUtils.rm_rf(@dir)
  end

  # One command over RESP: enough for the tests (push jobs, read sets) without a client gem.
  def call(*command)
    Socket.tcp("127.0.0.1", @port, connect_timeout: 2) do |socket|
      socket.write("*#{command.size}\r\n" + command.map { |arg| "$#{arg.to_s.bytesize}\r\n#{arg}\r\n" }.join)
      read_reply(socket)
    end
  end

  def log = File.exist?(File.join(@dir, "redis.log")) ? File.read(File.join(@dir, "redis.log")) : ""

  private

  def ping
    call("PING") == "PONG"
  rescue SystemCallError, IOError
    false
  end

  def read_reply(socket)
    line = socket.gets("\r\n") or raise IOError, "redis closed the connection"
    line = line.chomp("\r\n")
    case line[0]
    when "+" then line[1..]
    when "-" then raise line[1..]
    when ":" then Integer(line[1..])
    when "$"
      size = Integer(line[1..])
      size.negative? ? nil : socket.read(size + 2).chomp("\r\n")
    when "*"
      size = Integer(line[1..])
      size.negative? ? nil : Array.new(size) { read_reply(socket) }
    else raise IOError, "unexpected reply #{line.inspect}"
    end
  end

  def free_port
    server = TCPServer.new("127.0.0.1", 0)
    server.addr[1]
  ensure
    server&.close
  end

  def clock = Process.clock_gettime(Process::CLOCK_MONOTONIC)
end
