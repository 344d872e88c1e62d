# frozen_string_literal: true

require "test_helper"
require "tmpdir"
require_relative "../support/redis_server"
require_relative "../../bench/wait_truth"

# A real job runner on `async` (bench/wait_truth_async_jobs.rb, under gemfiles/falcon.gemfile's
# bundle): worker tasks on one event loop, each popping its jobs from a real redis-server over its
# own TCP connection (issue 38). A quick job that a worker receives while a CPU-bound job keeps the
# loop on another fiber waits for the loop, not for the GVL (nobody else wants it): its loop-wait
# (EventLoops.measure_job, from its bytes' arrival on that connection) must show it.
class AsyncJobsTest < Minitest::Test
  include GVLScopeTestHelper

  TRIES = 5
  # loop-wait starts at the kernel's time for the job's bytes (TCP_INFO's tcpi_last_data_recv), in
  # jiffies: 4 ms at HZ 250, this kind of machine's.
  KERNEL_JIFFY_MS = WaitTruth::KERNEL_JIFFY_MS

  def setup
    skip "redis-server is not installed (script/test installs it)" unless RedisServer.available?
    @dir = Dir.mktmpdir("gvlscope-async-jobs")
    @runner = WaitTruth::AsyncJobServer.new(dir: @dir)
  end

  def teardown
    @runner&.stop
    FileUtils.rm_rf(@dir) if @dir
  end

  # A QuickJob pushed 20-100 ms after a BurnJob of 300 ms of CPU, 5 times, and the same job alone.
  # One loop thread runs one fiber at a time, and the burn never gives the loop back: from the
  # moment the quick job's bytes reach the kernel on its worker's connection until the burn ends,
  # its worker cannot run. That wait is all the job loses beyond the same job alone (its read,
  # parse and run are the same work either way), and it is the loop's: loop-wait, with gvl-wait
  # for any GVL wait. 80 % and 4 of 5 tries: a loaded 2-core machine may take the CPU from the
  # runner or the pusher for a while, which delays the job but is no wait for the loop.
  def test_a_quick_job_behind_a_cpu_bound_job_reports_its_wait_for_the_loop
    @runner.start
    rng = Random.new(38)
    beside = Array.new(TRIES) do
      sample = @runner.run_beside_burn(rng.rand(WaitTruth::OFFSET_SECONDS))
      sleep 0.05 # the burning worker is back in BRPOP
      sample
    end
    alone = Array.new(TRIES) { @runner.run_alone }
    alone_ms = GVLScope::Units.median(alone.map(&:latency_ms))
    report = "alone (median #{alone_ms.round(1)} ms): #{describe(alone)}\nbeside: #{describe(beside)}\n#{@runner.child.log}"
    (beside + alone).each do |sample|
      refute_nil sample.parts["loop-wait"], "no loop-wait for a job on a worker task: #{report}"
      # Upper bound: the wait lies between the bytes' arrival and the job's end, inside the
      # pusher's latency; gvlscope's clock may be off by its calibration, loop-wait's start by a jiffy.
      assert_operator sample.wait_ms, :<=, WaitTruth.within_clock_error(sample.latency_ms) + KERNEL_JIFFY_MS, report
      assert_empty WaitTruth.broken_invariants(sample.parts, sample.latency_ms), report
    end
    covered = beside.count { |sample| sample.wait_ms >= 0.8 * (sample.latency_ms - alone_ms) }
    assert_operator covered, :>=, TRIES - 1, "loop-wait + gvl-wait against the delay: #{report}"
  end

  # Alone, no fiber keeps the loop: between the job's bytes' arrival and its worker's turn, the
  # runner only wakes from its select and resumes that worker. That is time its threads ran or
  # waited for a core, which the kernel counts (/proc/PID/task/*/schedstat): loop-wait is at most
  # that, plus a jiffy for its start, however loaded the machine is.
  def test_alone_a_jobs_loop_wait_is_the_runners_own_work_and_a_jiffy
    skip "no /proc/PID/schedstat (a kernel without CONFIG_SCHED_INFO)" unless File.exist?("/proc/self/schedstat")
    @runner.start
    measured = Array.new(2 * TRIES) do
      before = on_cpu_or_runnable_ns(@runner.child.pid)
      sample = @runner.run_alone
      [sample, (on_cpu_or_runnable_ns(@runner.child.pid) - before) / 1e6]
    end
    report = measured.map { |sample, busy_ms| "#{describe([sample])}, runner busy #{busy_ms.round(2)} ms" }.join("\n")
    measured.each do |sample, busy_ms|
      loop_wait = sample.parts["loop-wait"]
      refute_nil loop_wait, "no loop-wait: #{report}"
      assert_operator loop_wait, :<=, WaitTruth.within_clock_error(busy_ms) + KERNEL_JIFFY_MS, report
    end
  end

  # The harness at a tiny size (bench/wait_truth.rb --servers async-jobs): its runner boots, and its
  # table names it.
  def test_wait_truth_harness_runs_the_async_job_runner
    result = WaitTruth.run("async-jobs", tries: 2, seed: 1, dir: @dir)
    assert_equal [2, 2], [result.beside.size, result.alone.size]
    table = StringIO.new
    WaitTruth::Table.tries(result, table)
    assert_match(/^== async-jobs: 4 workers on Redis port \d+, async 2\.\d+\.\d+; Redis on loopback$/, table.string)
    result.beside.each { |sample| assert_includes sample.parts.keys, "loop-wait", table.string }
  end

  private

  def describe(samples) = samples.map { |s| "#{s.latency_ms.round(1)} ms #{s.parts.transform_values { |ms| ms.round(2) }}" }.join("; ")

  # ns the process's threads have spent on a CPU and waiting for one (schedstat's first two fields).
  def on_cpu_or_runnable_ns(pid)
    Dir["/proc/#{pid}/task/*/schedstat"].sum { |path| File.read(path).split.first(2).sum(&:to_i) }
  end
end
