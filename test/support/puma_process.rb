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

  LISTENING = %r{Listening on http://127\.0\.0\.1:(\d+)}
  BOOT_TIMEOUT = 60 # seconds: a loaded 2-core machine boots Puma slowly

  # A Puma child with +config+ (puma.rb's lines after a loopback bind on a free port) in +dir+ and
  # gvlscope's lib on its load path, its output in dir/puma.log, +env+ added to its environment.
  # The Server is yielded as soon as it is spawned (to be stopped in teardown should the boot fail),
  # and returned, with its port, once it listens and its log says +booted+ (a pattern) too.
  def start_puma_in(dir, config, env: {}, booted: LISTENING)
    config_path = File.join(dir, "puma.rb")
    File.write(config_path, "bind \"tcp://127.0.0.1:0\"\n#{config}")
    log_path = File.join(dir, "puma.log")
    pid = Process.spawn(env, RbConfig.ruby, "-I", File.join(GVLScopeTestHelper::ROOT, "lib"), Gem.bin_path("puma", "puma"),
                        "-C", config_path, out: log_path, err: %i[child out], pgroup: true)
    server = Server.new(pid, log_path)
    yield server if block_given?
    deadline = clock + BOOT_TIMEOUT
    until (log = server.log).match?(LISTENING) && log.match?(booted)
      flunk "puma exited:\n#{log}" if Process.waitpid(pid, Process::WNOHANG)
      flunk "puma did not boot in #{BOOT_TIMEOUT} s:\n#{log}" if clock > deadline
      sleep 0.05
    end
    server.port = Integer(log[LISTENING, 1])
    server
  end

  def clock = Process.clock_gettime(Process::CLOCK_MONOTONIC)
end
