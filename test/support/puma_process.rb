# frozen_string_literal: true

require "timeout"

# Child Puma processes for the tests that drive a real server (test/integrations/puma_test.rb,
# test/integrations/rails_test.rb): started in their own process group, stopped with TERM and, if Puma does not
# finish shutting down (docs/web.md, known issues), KILL, so a stuck server cannot hang the suite.
module PumaProcess
  Server = Struct.new(:pid, :log_path, :port, :metrics_port) do
    def log = File.read(log_path)
  end

  def stop(server)
    Process.kill(:TERM, -server.pid)
    Timeout.timeout(10) { Process.wait(server.pid) }
  rescue Timeout::Error
    Process.kill(:KILL, -server.pid)
    Process.wait(server.pid)
  rescue Errno::ESRCH, Errno::ECHILD
    nil
  end

  def clock = Process.clock_gettime(Process::CLOCK_MONOTONIC)
end
