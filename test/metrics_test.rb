# frozen_string_literal: true

require "test_helper"
require "tmpdir"

# Metrics on scripted workloads, with bounds that follow from how the scheduler works (100 ms
# timeslices) and are loose enough for a noisy 2-core machine.
class MetricsTest < Minitest::Test
  include GVLScopeTestHelper

  def setup
    GVLScope::Metrics.enable
  end

  def teardown
    GVLScope::Metrics.disable
    GVLScope.stop if GVLScope.tracing?
  end

  include GVLWorkloads

  def interval
    before = GVLScope::Metrics.snapshot
    yield
    GVLScope::Metrics.snapshot - before
  end

  # --- exact event sequences (Native.debug_metrics_replay: the hook's metrics on a private slot) ---

  MS = 1_000_000

  # [run, wait, idle, gc] in ms of a slot that saw +events+, read +at+ ms after they began.
  def replay(events, at) = GVLScope::Native.debug_metrics_replay(events, at).map { |ns| ns.fdiv(MS) }

  def test_each_state_counts_until_the_next_event_and_a_snapshot_counts_the_one_in_progress
    cycle = [[:resumed, 0], [:suspended, 2], [:ready, 5], [:resumed, 6]]
    assert_equal [2.0, 1.0, 3.0, 0.0], replay(cycle, 6)
    assert_equal [3.0, 1.0, 3.0, 0.0], replay(cycle, 7), "the hold in progress"
    assert_equal [2.0, 0.0, 1.0, 0.0], replay(cycle.first(2), 3), "the idle in progress"
  end

  # A snapshot counts the state in progress; the thread's exit ends that state and must keep it
  # where the snapshot put it. An exited thread's slot is retired into the process's totals, which
  # Prometheus reads as counters: a total that goes back, even by microseconds, reads as a reset.
  def test_a_thread_that_exits_keeps_what_a_snapshot_saw_of_its_last_state
    { "idle" => [[[:resumed, 0], [:suspended, 1]], 2],
      "a wait" => [[[:resumed, 0], [:suspended, 1], [:ready, 2]], 1],
      "a GC" => [[[:resumed, 0], [:gc_enter, 1]], 3] }.each do |state, (events, counter)|
      seen = replay(events, 6)
      exited = replay(events + [[:exited, 11]], 20)
      # The last state counts from its event to the exit at 11 ms.
      assert_equal 11.0 - events.last[1], exited[counter], "exited from #{state}: #{seen.inspect} then #{exited.inspect}"
      exited.zip(seen).each { |after, before| assert_operator after, :>=, before, "exited from #{state}: #{seen.inspect} then #{exited.inspect}" }
    end
  end

  def test_a_replay_names_its_events
    error = assert_raises(ArgumentError) { GVLScope::Native.debug_metrics_replay([[:started, 0]], 1) }
    assert_equal "not an event kind: :started", error.message
  end

  def test_one_cpu_thread_alone_holds_the_gvl_and_never_waits
    metrics = interval do
      deadline = clock + 0.5
      x = 0
      x += 1 while clock < deadline
    end
    assert_operator metrics.held_ratio, :>=, 0.9
    assert_operator metrics.wait_ns, :<, 0.05 * metrics.wall_ns
  end

  # Each waits while the other runs: total wait is about the wall time, and the GVL is never idle.
  # Each spins for 0.4 s of its own CPU time, not of wall time: a thread is preempted once it has
  # noticed 10 ticks of the 10 ms timer while running (thread.c, running_time_us), so other
  # processes on the cores stretch a timeslice's wall time but not the CPU in it (at most ~10
  # ticks' worth, ~100-120 ms): 0.8 s of CPU is at least ~7 slices, 6 hand-overs.
  def test_two_cpu_threads_wait_for_each_other
    metrics = interval { 2.times.map { |n| cpu_time_thread("cpu#{n}", 0.4) }.each(&:join) }
    assert_operator metrics.held_ratio, :>=, 0.9
    cpu_wait = metrics.all_rows.select { |row| row.name.to_s.start_with?("cpu") || row.exited }.sum(&:wait_ns)
    assert_includes (0.6 * metrics.wall_ns)..(1.4 * metrics.wall_ns), cpu_wait
    assert_operator metrics.released_preempted, :>=, 5, metrics.to_h[:releases].inspect
  end

  def echo_round_trips(count)
    super { GVLScope::Metrics.snapshot.threads.find { |r| r.name == "echo" && !r.exited } }
  end

  # The convoy effect: beside a CPU-bound thread, each wake-up of the IO thread waits about a
  # timeslice for the GVL (~100 ms measured on 3.3); alone it waits microseconds.
  def test_io_thread_beside_a_cpu_thread_waits_a_timeslice_per_round_trip
    alone = echo_round_trips(20)
    assert_operator alone.wait_ns / 20, :<, 1_000_000

    stop = false
    cpu = Thread.new { Thread.current.name = "cpu"; x = 0; x += 1 until stop }
    convoy = echo_round_trips(20)
    stop = true
    cpu.join
    assert_operator convoy.wait_ns, :>=, 20 * 50_000_000
  end

  def test_measure_splits_a_sleep_into_idle
    measurement = GVLScope.measure { sleep 0.2; :done }
    assert_equal :done, measurement.value
    assert_includes 0.19..0.5, measurement.idle_ns / 1e9 # sleep never returns early; load may delay it
    assert_operator measurement.run_ns + measurement.wait_ns, :<, 20_000_000
  end

  def test_measure_turns_metrics_on_only_for_the_block
    GVLScope::Metrics.disable
    GVLScope.measure { nil }
    refute GVLScope::Metrics.enabled?
  end

  def test_histograms_sum_to_holds_and_waits_and_reset_zeroes_everything
    4.times.map { |n| Thread.new { 5.times { sleep 0.001; 10_000.times.sum } } }.each(&:join)
    snapshot = GVLScope::Metrics.snapshot
    assert_operator snapshot.waits, :>, 20
    assert_equal snapshot.all_rows.sum(&:holds), snapshot.hold_histogram.sum
    assert_equal snapshot.waits, snapshot.wait_histogram.sum
    assert_equal snapshot.waits, snapshot.waiters_at_acquire_histogram.sum
    assert snapshot.frozen?

    GVLScope::Metrics.reset
    zeroed = GVLScope::Metrics.snapshot
    assert_equal 0, zeroed.waits
    assert_equal 0, zeroed.hold_histogram.sum
    assert_operator zeroed.wall_ns, :<, 50_000_000
  end

  def test_current_thread_counters
    sleep 0.05
    row = GVLScope::Metrics.current_thread
    assert_operator row.idle_ns, :>=, 40_000_000
    assert_operator row.run_ns, :>, 0
  end

  # One hook, two consumers: they must agree on how long each thread waited for the GVL.
  def test_metrics_and_trace_agree_on_wait_per_thread
    path = File.join(Dir.mktmpdir("gvlscope-metrics"), "t.gvl")
    GVLScope::Metrics.reset
    GVLScope.start(path)
    before = GVLScope::Metrics.snapshot
    threads = 3.times.map { |n| cpu_thread("agree#{n}", 0.4) }
    threads.each(&:join)
    after = GVLScope::Metrics.snapshot
    GVLScope.stop
    metrics = after - before
    timeline = GVLScope::Model.timeline(path)
    3.times do |n|
      name = "agree#{n}"
      traced = timeline.threads.values.find { |t| t.label == name }.intervals.select { |i| i.state == :wait }.sum(&:duration_ns)
      counted = metrics.all_rows.find { |row| row.name == name }.wait_ns
      assert_operator traced, :>, 100_000_000
      assert_in_delta traced, counted, 0.01 * traced, name
    end
  end

  def test_snapshot_requires_enable
    GVLScope::Metrics.disable
    assert_raises(GVLScope::Error) { GVLScope::Metrics.snapshot }
    assert_raises(GVLScope::Error) { GVLScope::Metrics.reset }
  end

  def test_prometheus_exposition_parses
    4.times.map { Thread.new { sleep 0.001 } }.each(&:join)
    samples = PrometheusText.parse(GVLScope::Metrics.prometheus(worker: "0"))
    assert_equal "histogram", samples.types["gvlscope_gvl_hold_seconds"]
    buckets = samples.values.select { |name, labels, _| name == "gvlscope_gvl_wait_seconds_bucket" && labels["worker"] == "0" }
    counts = buckets.map(&:last)
    assert_equal counts.sort, counts, "cumulative buckets"
    assert_equal "+Inf", buckets.last[1]["le"]
    count = samples.values.find { |name, _, _| name == "gvlscope_gvl_wait_seconds_count" }.last
    assert_equal buckets.last.last, count
  end
end
