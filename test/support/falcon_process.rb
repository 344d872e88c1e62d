# frozen_string_literal: true

require "socket"
require "timeout"
require_relative "process_group"

# A real Falcon (gemfiles/falcon.gemfile: Falcon 0.57, async 2) for test/integrations/falcon_test.rb
# and bench/wait_truth.rb's Falcon servers: `falcon serve` on a free loopback port in a child Ruby
# of its own process group, its output (Falcon's JSON log lines) kept in a file for failure
# messages; stopped with TERM and, if it does not finish, KILL, so a stuck server cannot hang
# anything. Each Falcon worker runs its requests on the fibers of one Async reactor per thread.
#   model: :forked   --count processes, one reactor thread each (count 1: every request on one thread)
#          :threaded --count threads in one process, a reactor each
class FalconProcess
  ROOT = File.expand_path("../..", __dir__)
  GEMFILE = File.join(ROOT, "gemfiles/falcon.gemfile")
  MODELS = %i[forked threaded].freeze
  BOOT_TIMEOUT = 60
  # The port is chosen free, then bound by Falcon: another process may take it in between.
  BIND_ATTEMPTS = 3

  attr_reader :port, :pid, :log_path

  def initialize(rackup:, dir:, model: :forked, count: 1, env: {})
    raise ArgumentError, "model: #{model.inspect}; models: #{MODELS.join(', ')}" unless MODELS.include?(model)

    @rackup = rackup
    @dir = dir
    @model = model
    @count = count
    @env = env
  end

  # Boots the server and returns once Falcon's container says its workers are ready.
  def start
    BIND_ATTEMPTS.times do
      # A log of its own for each boot (several servers may share the directory).
      @log_path = File.join(@dir, "falcon-#{Dir[File.join(@dir, 'falcon-*.log')].size}.log")
      @port = free_port
      @pid = Process.spawn(
        # Falcon's bundle, not the caller's (a test run under the main bundle's `bundle exec`).
        @env.merge("BUNDLE_GEMFILE" => GEMFILE, "RUBYOPT" => nil),
        RbConfig.ruby, "-rbundler/setup", "-e", 'load Gem.bin_path("falcon", "falcon")', "--",
        "serve", "--bind", "http://127.0.0.1:#{@port}", "--#{@model}", "--count", @count.to_s, "--config", @rackup,
        out: @log_path, err: %i[child out], pgroup: true, chdir: @dir
      )
      return self if ready?
      raise "falcon did not start:\n#{log}" unless log.include?("EADDRINUSE")
    end
    raise "falcon found no free port in #{BIND_ATTEMPTS} attempts:\n#{log}"
  end

  def log = File.read(@log_path)

  # "Falcon 0.57.0, forked, 1 process" (the version from its first log line).
  def description
    unit = { forked: %w[process processes], threaded: %w[thread threads] }.fetch(@model)[@count == 1 ? 0 : 1]
    "Falcon #{log[/Falcon v([\d.]+) taking flight/, 1] || '?'}, #{@model}, #{@count} #{unit}"
  end

  # TERM to Falcon's controller alone, which stops its workers (TERM to the whole group races its
  # own interrupt: a worker may exit "with error!" in the log); KILL to the group if it hangs.
  def stop
    return unless @pid

    ProcessGroup.stop(@pid, term: @pid)
  ensure
    @pid = nil
  end

  private

  # Async::Container's controller logs {"ready":true,...} once every worker said it is ready (the
  # listening socket is bound before they start: connections wait in its backlog from then on).
  # false if Falcon exited first.
  def ready?
    deadline = clock + BOOT_TIMEOUT
    until log.include?('"ready":true')
      if Process.waitpid(@pid, Process::WNOHANG)
        @pid = nil
        return false
      end
      raise "falcon: not ready in #{BOOT_TIMEOUT} s:\n#{log}" if clock > deadline

      sleep 0.05
    end
    true
  end

  def free_port = TCPServer.open("127.0.0.1", 0) { |server| server.addr[1] }
  def clock = Process.clock_gettime(Process::CLOCK_MONOTONIC)
end
