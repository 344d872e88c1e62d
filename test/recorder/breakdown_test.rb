# frozen_string_literal: true

require "test_helper"
require "gvlscope/recorder/breakdown"

# The per-route / per-job store: exact sums, bounded series, snapshots that do not move, safe
# under threads and fork.
class BreakdownTest < Minitest::Test
  include GVLScopeTestHelper

  Timing = Struct.new(:run_ns, :wait_ns, :idle_ns, :gc_ns, :duration_ns)

  def setup = GVLScope::Breakdown.reset!
  def teardown = GVLScope::Breakdown.reset!

  def timing(run: 0, wait: 0, idle: 0, gc: 0) = Timing.new(run, wait, idle, gc, run + wait + idle + gc)

  def entry(kind, label, tags = {})
    GVLScope::Breakdown.snapshot.find { |e| e.kind == kind && e.label == label && e.tags == tags }
  end

  def test_sums_counts_and_a_log2_histogram_of_waits
    GVLScope::Breakdown.record(:route, "UsersController#show", timing(run: 10, wait: 0, idle: 5, gc: 1))
    GVLScope::Breakdown.record(:route, "UsersController#show", timing(run: 20, wait: 3, idle: 0, gc: 0))
    GVLScope::Breakdown.record(:route, "UsersController#show", timing(run: 1, wait: 1_000_000))

    e = entry(:route, "UsersController#show")
    assert_equal [3, 31, 1_000_003, 5, 1, 1_000_040], [e.count, e.run_ns, e.wait_ns, e.idle_ns, e.gc_ns, e.duration_ns]
    assert_equal e.run_ns + e.wait_ns + e.idle_ns + e.gc_ns, e.duration_ns
    expected = Array.new(64, 0)
    expected[0] = 1                                     # a zero wait
    expected[GVLScope::Log2.bucket(3)] += 1             # [2, 4)
    expected[GVLScope::Log2.bucket(1_000_000)] += 1     # [2^19, 2^20)
    assert_equal expected, e.wait_buckets
    assert_equal 20, GVLScope::Log2.bucket(1_000_000)
    assert_equal 1.0, e.sample_rate
    assert e.frozen? && e.wait_buckets.frozen? && e.label.frozen?
  end

  # A RequestTiming's pickup wait is summed apart, so the parts add up: run + wait + idle + gc =
  # duration + pickup_wait.
  def test_a_request_timing_is_recorded_with_its_pickup_wait
    GVLScope::Metrics.enable
    timing = GVLScope::RequestTiming.start
    sleep 0.002
    timing.finish!
    GVLScope::Breakdown.record(:route, "GET /", timing)
    e = entry(:route, "GET /")
    assert_equal [1, timing.run_ns, timing.wait_ns, timing.idle_ns, timing.gc_ns, timing.duration_ns, timing.pickup_wait_ns,
                  timing.releases],
                 [e.count, e.run_ns, e.wait_ns, e.idle_ns, e.gc_ns, e.duration_ns, e.pickup_wait_ns, e.releases]
    assert_operator e.idle_ns, :>=, 2_000_000
    assert_equal timing.counters, GVLScope::Counters.of(e)
  ensure
    GVLScope::Metrics.disable
  end

  # A job's queue latency (RequestTiming#enqueued_at=) is summed with its other numbers, whether
  # the timing is a RequestTiming (added in C) or anything answering the numbers; a route, or a
  # timing without it, adds 0. Each number of the C series is read back under its own name.
  def test_a_jobs_queue_latency_is_summed
    GVLScope::Metrics.enable
    timing = GVLScope::RequestTiming.start
    timing.enqueued_at = Process.clock_gettime(Process::CLOCK_REALTIME, :millisecond) - 1500
    timing.finish!
    GVLScope::Breakdown.record(:job, "HardJob", timing, { queue: "default" })
    queued = Struct.new(*Timing.members, :queue_latency_ns).new(1, 2, 3, 4, 5, 7_000)
    GVLScope::Breakdown.record(:job, "HardJob", queued, { queue: "default" })
    GVLScope::Breakdown.record(:job, "HardJob", timing(run: 1), { queue: "default" })
    GVLScope::Breakdown.record(:route, "GET /", GVLScope::RequestTiming.start.tap(&:finish!))

    e = entry(:job, "HardJob", { queue: "default" })
    assert_operator timing.queue_latency_ns, :>=, 1_500_000_000
    assert_equal [3, timing.queue_latency_ns + 7_000], [e.count, e.queue_latency_ns]
    assert_equal timing.run_ns + 2, e.run_ns
    assert_equal 0, entry(:route, "GET /").queue_latency_ns
    assert_equal %i[count run_ns wait_ns idle_ns gc_ns duration_ns pickup_wait_ns io_overlap_wait_ns queue_latency_ns loop_wait_ns
                    releases sample_rate], GVLScope::Native::BreakdownSeries::FIELDS
    assert_equal GVLScope::Native::BreakdownSeries::FIELDS.size + GVLScope::Breakdown::BUCKETS,
                 GVLScope::Native::BreakdownSeries.new.to_a.size
  ensure
    GVLScope::Metrics.disable
  end

  def test_tags_are_part_of_the_key_and_kinds_are_apart
    GVLScope::Breakdown.record(:job, "HardJob", timing(run: 1), { queue: "default" })
    GVLScope::Breakdown.record(:job, "HardJob", timing(run: 2), { queue: "low" })
    GVLScope::Breakdown.record(:job, "HardJob", timing(run: 4), { queue: "low" })
    GVLScope::Breakdown.record(:route, "HardJob", timing(run: 8))

    assert_equal [[:route, "HardJob", {}, 1, 8], [:job, "HardJob", { queue: "default" }, 1, 1],
                  [:job, "HardJob", { queue: "low" }, 2, 6]].sort_by(&:inspect),
                 GVLScope::Breakdown.snapshot.map { |e| [e.kind, e.label, e.tags, e.count, e.run_ns] }.sort_by(&:inspect)
  end

  def test_past_the_cap_new_series_go_under_other_and_known_ones_keep_counting
    GVLScope::Breakdown.configure(max_routes: 2, max_jobs: 1)
    %w[a b c d a].each { |label| GVLScope::Breakdown.record(:route, label, timing(run: 1)) }
    GVLScope::Breakdown.record(:route, "b", timing(run: 1), { status: 500 }) # a new series too
    GVLScope::Breakdown.record(:job, "J1", timing(wait: 7))
    GVLScope::Breakdown.record(:job, "J2", timing(wait: 9), { queue: "q" })

    routes = GVLScope::Breakdown.snapshot.select { |e| e.kind == :route }.to_h { |e| [[e.label, e.tags], e.count] }
    assert_equal({ ["a", {}] => 2, ["b", {}] => 1, ["other", {}] => 3 }, routes)
    jobs = GVLScope::Breakdown.snapshot.select { |e| e.kind == :job }.to_h { |e| [[e.label, e.tags], e.wait_ns] }
    assert_equal({ ["J1", {}] => 7, ["other", {}] => 9 }, jobs)
    assert_equal 2, GVLScope::Breakdown.max_labels(:route)

    # 1000 distinct labels: the store holds at most max_labels + 1 series per kind.
    GVLScope::Breakdown.reset!
    GVLScope::Breakdown.configure(max_labels: 10)
    1000.times { |i| GVLScope::Breakdown.record(:route, "GET /u/#{i}", timing(run: 1)) }
    snapshot = GVLScope::Breakdown.snapshot
    assert_equal 11, snapshot.size
    assert_equal 1000, snapshot.sum(&:count)
    assert_equal 990, entry(:route, "other").count
  end

  def test_bad_configuration_and_kind_are_one_line_errors
    error = assert_raises(GVLScope::Error) { GVLScope::Breakdown.configure(max_label: 3) }
    assert_match(/unknown option :max_label/, error.message)
    error = assert_raises(GVLScope::Error) { GVLScope::Breakdown.configure(max_labels: -1) }
    assert_match(/max_labels must be an Integer >= 0, got -1/, error.message)
    assert_raises(GVLScope::Error) { GVLScope::Breakdown.configure(max_routes: "5") }
    error = assert_raises(GVLScope::Error) { GVLScope::Breakdown.record(:queue, "x", timing) }
    assert_match(/kind must be one of \[:route, :job\], got :queue/, error.message)
  end

  def test_a_snapshot_does_not_move_and_a_mutable_label_does_not_change_the_key
    label = +"GET /users"
    GVLScope::Breakdown.record(:route, label, timing(run: 1), { region: "eu" }, 0.25)
    before = GVLScope::Breakdown.snapshot
    label << "/changed"
    GVLScope::Breakdown.record(:route, "GET /users", timing(run: 1), { region: "eu" }, 0.25)
    after = GVLScope::Breakdown.snapshot
    assert_equal [1], before.map(&:count)
    assert_equal [2], after.map(&:count)
    assert_equal "GET /users", after.first.label
    assert_equal 0.25, after.first.sample_rate
  end

  def test_recording_into_a_known_series_allocates_nothing
    tags = { queue: "default" }.freeze
    t = timing(run: 5, wait: 7, idle: 1)
    GVLScope::Breakdown.record(:job, "HardJob", t, tags)
    GVLScope::Breakdown.record(:route, "GET /", t)
    before = GC.stat(:total_allocated_objects)
    1000.times do
      GVLScope::Breakdown.record(:job, "HardJob", t, tags)
      GVLScope::Breakdown.record(:route, "GET /", t)
    end
    allocated = GC.stat(:total_allocated_objects) - before
    assert_operator allocated, :<, 10, "allocations for 2000 records"
  end

  # A producer that makes a new (frozen) tags Hash per call is counted right, and the identities
  # remembered for the lock-free lookup stay few.
  def test_new_tags_objects_per_call_are_counted_and_not_remembered_without_end
    100.times { GVLScope::Breakdown.record(:job, "J", timing(run: 1), { queue: "q" }.freeze) }
    10.times { GVLScope::Breakdown.record(:job, "J", timing(run: 1), { queue: "q" }) }
    assert_equal 110, entry(:job, "J", { queue: "q" }).count
    identities = GVLScope::Breakdown.instance_variable_get(:@by_identity)[:job]["J"]
    assert_operator identities.size, :<=, GVLScope::Breakdown::MAX_IDENTITIES
  end

  def test_threads_recording_at_once_lose_nothing
    threads = 8.times.map do |i|
      Thread.new { 5000.times { |n| GVLScope::Breakdown.record(:route, "r#{n % 3}", timing(run: i + 1)) } }
    end
    threads.each(&:join)
    snapshot = GVLScope::Breakdown.snapshot
    assert_equal 40_000, snapshot.sum(&:count)
    assert_equal 5000 * (1..8).sum, snapshot.sum(&:run_ns)
    assert_equal 40_000, snapshot.sum { |e| e.wait_buckets[0] }
  end

  def test_a_forked_child_starts_empty_and_keeps_the_caps
    out, err, status = run_ruby(<<~RUBY)
      require "gvlscope"
      t = Struct.new(:run_ns, :wait_ns, :idle_ns, :gc_ns, :duration_ns).new(1, 2, 3, 4, 10)
      GVLScope::Breakdown.configure(max_labels: 1)
      GVLScope::Breakdown.record(:route, "parent", t)
      pid = fork do
        before = GVLScope::Breakdown.snapshot.size
        GVLScope::Breakdown.record(:route, "child", t)
        GVLScope::Breakdown.record(:route, "child2", t)
        puts [before, GVLScope::Breakdown.snapshot.map(&:label)].inspect
      end
      Process.wait(pid)
      puts GVLScope::Breakdown.snapshot.map(&:label).inspect
    RUBY
    assert status.success?, err
    assert_equal [[0, %w[child other]].inspect, %w[parent].inspect], out.lines.map(&:chomp)
  end
end
