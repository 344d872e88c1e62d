# frozen_string_literal: true

require "socket"
require "puma"
require "puma/configuration"
require "puma/launcher"

# Boots a Rack app on an in-process Puma (one worker process, quiet) on a free loopback port, as
# the lab's Puma scenarios do; returns once it accepts connections.
module PumaBoot
  Server = Struct.new(:port, :launcher, :thread) do
    def stop
      launcher.stop
      thread.join(10)
    end
  end

  def self.start(app, min_threads:, max_threads:, timeout_s: 20)
    port = TCPServer.open("127.0.0.1", 0) { |probe| probe.addr[1] }
    config = Puma::Configuration.new do |c|
      c.bind "tcp://127.0.0.1:#{port}"
      c.threads min_threads, max_threads
      c.workers 0
      c.app app
      c.log_requests false
      c.quiet
    end
    launcher = Puma::Launcher.new(config, log_writer: Puma::LogWriter.null)
    thread = Thread.new { launcher.run }
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout_s
    begin
      TCPSocket.new("127.0.0.1", port).close
    rescue Errno::ECONNREFUSED
      raise "puma did not start" if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline

      sleep 0.02
      retry
    end
    Server.new(port, launcher, thread)
  end
end
