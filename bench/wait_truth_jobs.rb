# frozen_string_literal: true

# The Sidekiq app of bench/wait_truth.rb, loaded by the real Sidekiq CLI (`sidekiq -r this file`)
# under Sidekiq 8 (the main Gemfile) or 7 (gemfiles/sidekiq7.gemfile). GVLScope::Sidekiq logs
# every job (log_wait_over_ms: 0): that line is gvlscope's figure for the job.
#
#   BurnJob(ms, started)  burns ms of its thread's CPU time in a pure Ruby loop (the CPU-bound
#                neighbour), once +started+ BurnJobs have started in the process (a minute at most):
#                a burst's jobs keep every processor busy together
#   QuickJob     notes the CLOCK_REALTIME of its end: the ground truth's end, written to the file
#                WAIT_TRUTH_ENDS ({"jid": seconds}) when Sidekiq exits, so that no IO of the
#                harness's own runs in or beside the jobs it measures
require "sidekiq"
require "json"
require "gvlscope/sidekiq"

$stdout.sync = true # the harness reads the log while Sidekiq runs

Sidekiq.configure_server do |config|
  config.redis = { url: ENV.fetch("REDIS_URL") }
  config.server_middleware { |chain| chain.add GVLScope::Sidekiq, log_wait_over_ms: 0, stats_every: nil }
end

class BurnJob
  include Sidekiq::Job

  STARTED = Mutex.new
  @started = 0

  class << self
    attr_reader :started

    def started_one = STARTED.synchronize { @started += 1 }
  end

  def perform(ms, started = 0)
    BurnJob.started_one
    give_up = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 60
    # Asleep, not burning, while the others start: a processor needs the GVL a few times to start
    # its job, and beside nine burning ones that took ~2 s each.
    sleep 0.005 while BurnJob.started < started && Process.clock_gettime(Process::CLOCK_MONOTONIC) < give_up
    cpu_clock = -> { Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) }
    deadline = cpu_clock.call + ms / 1000.0
    x = 0
    x += 1 while cpu_clock.call < deadline
  end
end

class QuickJob
  include Sidekiq::Job

  # Thread::Queue: pushing neither blocks nor gives up the GVL.
  ENDS = Thread::Queue.new

  def perform = ENDS << [jid, Process.clock_gettime(Process::CLOCK_REALTIME)]
end

at_exit do
  ends = {}
  ends.store(*QuickJob::ENDS.pop) until QuickJob::ENDS.empty?
  File.write(ENV.fetch("WAIT_TRUTH_ENDS"), JSON.generate(ends))
end
