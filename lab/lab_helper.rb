# frozen_string_literal: true

# What every lab scenario shares. A scenario is a plain Ruby program (lab/*.rb, runnable alone:
# `ruby lab/convoy.rb`) that prints its progress line by line and ends by writing its measured
# numbers as JSON (to GVLSCOPE_LAB_RESULT, or stdout). `gvlscope lab run NAME` runs it traced and
# judges the numbers (lib/gvlscope/lab/scenarios.rb).
require "json"
require "rbconfig"
require "socket"
require_relative "ractor_result"
require_relative "../lib/gvlscope/support/units"
$stdout.sync = true # progress as it happens, line by line, even into a pipe

module LabHelper
  module_function

  SIZE = ENV.fetch("GVLSCOPE_LAB_SIZE", "small") # tiny (tests), small (default), full

  def size(tiny:, small:, full:)
    { "tiny" => tiny, "small" => small, "full" => full }.fetch(SIZE)
  end

  def now = Process.clock_gettime(Process::CLOCK_MONOTONIC)

  def seconds
    started = now
    yield
    now - started
  end

  # Loop iterations this machine does in +seconds+ of CPU: published iteration counts came from
  # other machines, so every CPU-bound workload is sized from this instead.
  def iterations_for(seconds)
    count = 200_000
    loop do
      took = seconds { countdown(count) }
      return [(count * seconds / took).round, 1000].max if took >= 0.05

      count *= 4
    end
  end

  def countdown(count)
    count -= 1 while count.positive?
  end

  # A thread that keeps the GVL busy until stopped; the convoy's neighbour.
  def cpu_thread(name: "cpu", priority: Integer(ENV.fetch("GVLSCOPE_LAB_PRIORITY", 0)))
    thread = Thread.new do
      x = 0
      x += 1 until Thread.current[:stop]
    end
    thread.name = name
    thread.priority = priority
    thread
  end

  def stop(thread)
    thread[:stop] = true
    thread.join
  end

  # Runs each variant +rounds+ times, alternating, and returns each one's median seconds: a busy
  # neighbour on the machine then slows every variant alike instead of whichever ran first.
  def alternating(rounds, variants)
    times = variants.transform_values { [] }
    rounds.times { variants.each { |name, work| times[name] << seconds(&work) } }
    times.transform_values { |list| GVLScope::Units.median(list) }
  end

  # RUBY_THREAD_TIMESLICE exists from Ruby 3.4; 3.3's timeslice is always 100 ms.
  def timeslice_ms
    return 100 if Gem::Version.new(RUBY_VERSION) < Gem::Version.new("3.4")

    Integer(ENV.fetch("RUBY_THREAD_TIMESLICE", 100))
  end

  # Runs +code+ in a separate Ruby process, untraced: loopback servers and load generators must
  # not compete for the GVL they are measuring. Returns [pid, first line it printed].
  # The start of a client script for spawn_helper: its port and count from its arguments, "ready"
  # printed (spawn_helper waits for a first line), connected.
  CLIENT_PROLOGUE = <<~'RUBY'
    require "socket"; require "json"
    $stdout.sync = true
    port, count = ARGV.map(&:to_i)
    puts "ready"
    socket = TCPSocket.new("127.0.0.1", port)
  RUBY

  def spawn_helper(code, *args)
    reader, writer = IO.pipe
    env = { "RUBYOPT" => nil, "GVLSCOPE_OUTPUT" => nil }
    pid = Process.spawn(env, RbConfig.ruby, "-e", code, *args, out: writer)
    writer.close
    line = reader.gets or raise "helper process #{pid} died before it was ready"
    [pid, line.chomp, reader]
  end

  def stop_helper(pid)
    Process.kill(:TERM, pid)
    Process.wait(pid)
  rescue Errno::ESRCH, Errno::ECHILD
    nil
  end

  # A delay server in its own process (its threads would share the measured process's GVL):
  # prints its port, then answers each line N on a connection with "ok" after N ms (a database or
  # HTTP call's round trip without its CPU). For spawn_helper.
  DELAY_SERVER = <<~'RUBY'
    require "socket"
    $stdout.sync = true
    server = TCPServer.new("127.0.0.1", 0)
    puts server.addr[1]
    loop do
      client = server.accept
      Thread.new(client) do |connection|
        while (line = connection.gets)
          sleep(Float(line) / 1000)
          connection.write("ok\n")
        end
      rescue IOError, SystemCallError
        nil
      ensure
        connection.close
      end
    end
  RUBY

  # A loopback HTTP/1.1 server in its own process that answers every GET after +delay+ seconds
  # (standing in for a remote service's round trip). Returns [pid, port].
  HTTP_SERVER = <<~'RUBY'
    require "socket"
    $stdout.sync = true
    delay = Float(ARGV[0])
    server = TCPServer.new("127.0.0.1", 0)
    puts server.addr[1]
    loop do
      client = server.accept
      Thread.new(client) do |connection|
        while (line = connection.gets) && line != "\r\n"; end
        sleep delay
        connection.write("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
        connection.close
      end
    end
  RUBY

  def http_server(delay)
    pid, port, = spawn_helper(HTTP_SERVER, delay.to_s)
    [pid, Integer(port)]
  end

  # Requests completed in +window+ seconds, one Net::HTTP GET (new connection each) at a time.
  def requests_in(port, window)
    require "net/http"
    deadline = now + window
    count = 0
    while now < deadline
      response = Net::HTTP.get_response(URI("http://127.0.0.1:#{port}/"))
      raise "unexpected HTTP #{response.code}" unless response.code == "200"

      count += 1
    end
    count / window
  end

  def result(measured)
    json = JSON.generate(measured)
    if (path = ENV["GVLSCOPE_LAB_RESULT"])
      # A new file only: never through a link, nor over a file someone else left there.
      File.open(path, File::WRONLY | File::CREAT | File::EXCL | File::NOFOLLOW, 0o600) { |file| file.write(json) }
    else
      puts json
    end
  end

  def say(line) = puts(line)
end
