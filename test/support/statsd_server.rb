# frozen_string_literal: true

require "json"
require "socket"
require "tmpdir"
require "timeout"
require_relative "npm_package"

# A real StatsD server: the `statsd` npm package (Etsy's statsd daemon, under node), listening on
# a free loopback UDP port, flushing every FLUSH_MS to test/support/statsd_json_backend.js, which
# prints what it aggregated and every packet it received. The test reads both.
class StatsDServer
  VERSION = "0.9.0"
  FLUSH_MS = 200
  BACKEND = File.expand_path("statsd_json_backend.js", __dir__)

  attr_reader :port, :packets, :flushes, :log

  # Starts a server for +test+ (a Minitest::Test: skips without npm); yields it, stops it after.
  def self.run(test)
    server = new(NpmPackage.ensure_installed(test, "statsd", VERSION))
    yield server
  ensure
    server&.stop
  end

  def initialize(package)
    @packets = []
    @flushes = []
    @log = +""
    @lock = Mutex.new
    @dir = Dir.mktmpdir("gvlscope-statsd")
    @port = free_udp_port
    config = File.join(@dir, "config.js")
    File.write(config, JSON.generate(port: @port, address: "127.0.0.1", mgmt_address: "127.0.0.1",
                                     mgmt_port: free_tcp_port, flushInterval: FLUSH_MS, backends: [BACKEND],
                                     deleteIdleStats: true))
    node = ENV.fetch("PATH", "").split(File::PATH_SEPARATOR).map { |d| File.join(d, "node") }.find { |p| File.executable?(p) }
    raise "node is not installed (apt-get install nodejs; script/test installs npm, which brings it)" unless node

    @out, writer = IO.pipe
    @pid = Process.spawn(node, File.join(package, "stats.js"), config, out: writer, err: writer)
    writer.close
    @reader = Thread.new { @out.each_line { |line| take(line) } }
    wait_for("statsd to start") { @log.include?("server is up") }
    # "server is up" can come before the UDP socket is bound: probe until a packet arrives.
    probe = UDPSocket.new
    probe.connect("127.0.0.1", @port)
    wait_for("statsd to receive") do
      probe.send("gvlscope_test.probe:1|c", 0) rescue nil # rubocop:disable Style/RescueModifier -- refused until bound
      @packets.any?
    end
    probe.close
    @lock.synchronize { @packets.clear }
  end

  # Blocks until the block (called with self, under the lock) is truthy; raises after +timeout+ s.
  def wait_for(what, timeout: 20)
    Timeout.timeout(timeout) do
      sleep 0.05 until @lock.synchronize { yield self }
    end
  rescue Timeout::Error
    raise "timed out waiting for #{what}; statsd said:\n#{@log}"
  end

  # Every counter and gauge of every flush so far, summed (counters) or last (gauges).
  def counters = @lock.synchronize { @flushes.each_with_object(Hash.new(0)) { |f, all| f["counters"].each { |k, v| all[k] += v } } }
  def gauges = @lock.synchronize { @flushes.each_with_object({}) { |f, all| all.merge!(f["gauges"]) } }

  def stop
    Process.kill(:TERM, @pid)
    Process.wait(@pid)
    @reader.join(5)
    @out.close
    FileUtils.rm_rf(@dir)
  rescue Errno::ESRCH, Errno::ECHILD
    nil
  end

  private

  def take(line)
    @lock.synchronize do
      if (json = line[/\AGVLSCOPE_FLUSH (.*)/, 1])
        @flushes << JSON.parse(json)
      elsif (json = line[/\AGVLSCOPE_PACKET (.*)/, 1])
        @packets << JSON.parse(json)
      else
        @log << line
      end
    end
  end

  def free_udp_port
    socket = UDPSocket.new
    socket.bind("127.0.0.1", 0)
    socket.addr[1]
  ensure
    socket&.close
  end

  def free_tcp_port
    server = TCPServer.new("127.0.0.1", 0)
    server.addr[1]
  ensure
    server&.close
  end
end
