# frozen_string_literal: true

require "test_helper"
require "minitest/mock"

# The Puma plugin's master side without Puma: workers' reports (as they arrive on the socket) and
# the /metrics exposition made of them. Prometheus counters never go down, whatever the workers do.
class PumaPluginTest < Minitest::Test
  Totals = GVLScope::PumaPlugin::Totals

  def setup
    @now = 1000.0
  end

  def plugin(per_worker:)
    GVLScope::PumaPlugin.new({ prometheus_per_worker: per_worker, log_interval: 0 }, log: ->(_) {}, clustered: true)
  end

  # A worker's totals: +held+ seconds of GVL held out of +wall+, +waiting+ threads waiting now.
  def totals(held:, wall:, waiting: 0, waits: 0)
    histogram = Array.new(GVLScope::Log2::BUCKETS, 0).tap { |h| h[10] = waits }
    Totals.new(wall * 1e9.to_i, held * 1e9.to_i, 0, 0, waiting, waits, waits, 0, 0, histogram, histogram.dup, histogram.dup)
  end

  def report(plugin, index, pid, totals)
    Process.stub(:clock_gettime, @now) { plugin.__send__(:receive, Marshal.dump([index, pid, totals.to_a])) }
  end

  # name => [[labels, value], ...] of the exposition, read by the strict parser.
  def scrape(plugin)
    text = Process.stub(:clock_gettime, @now) { plugin.exposition }
    PrometheusText.parse(text).values.group_by(&:first).transform_values { |rows| rows.map { |_, labels, value| [labels, value] } }
  end

  def value(samples, name, labels = {}) = samples.fetch(name).find { |l, _| l == labels }&.last

  def test_summed_counters_keep_the_totals_of_restarted_and_vanished_workers
    plugin = plugin(per_worker: false)
    report(plugin, 0, 100, totals(held: 2, wall: 10, waiting: 3, waits: 5))
    report(plugin, 1, 101, totals(held: 1, wall: 10, waiting: 1, waits: 2))
    first = scrape(plugin)
    assert_in_delta 3.0, value(first, "gvlscope_gvl_held_seconds_total")
    assert_equal 4, value(first, "gvlscope_waiting_threads")

    # Worker 0 restarts: a new pid at index 0, its counters from zero.
    @now += 1
    report(plugin, 0, 200, totals(held: 0.5, wall: 1, waiting: 0, waits: 1))
    second = scrape(plugin)
    assert_in_delta 3.5, value(second, "gvlscope_gvl_held_seconds_total")
    assert_in_delta 21.0, value(second, "gvlscope_wall_seconds_total")
    assert_equal 8, value(second, "gvlscope_gvl_acquisitions_total")
    assert_equal 8, value(second, "gvlscope_gvl_wait_seconds_count")
    assert_equal 8, value(second, "gvlscope_gvl_releases_total", { "cause" => "blocking" })
    # Gauges are the live workers' own: the departed worker's 3 waiting threads are gone.
    assert_equal 1, value(second, "gvlscope_waiting_threads")
    assert_in_delta 1.5 / 11, value(second, "gvlscope_gvl_held_ratio"), 1e-6

    # Worker 1 goes silent (stale): its totals stay in the counters, not in the gauges.
    @now += GVLScope::PumaPlugin::STALE_AFTER + 1
    report(plugin, 0, 200, totals(held: 0.75, wall: 7, waiting: 2, waits: 1))
    third = scrape(plugin)
    assert_in_delta 3.75, value(third, "gvlscope_gvl_held_seconds_total")
    assert_equal 2, value(third, "gvlscope_waiting_threads")
    assert_in_delta 0.75 / 7, value(third, "gvlscope_gvl_held_ratio"), 1e-6

    # Every counter sample of every scrape is at least what the previous scrape said.
    [first, second, third].each_cons(2) do |before, after|
      before.each do |name, samples|
        next unless name.end_with?("_total", "_count", "_bucket", "_sum")

        samples.each do |labels, previous|
          assert_operator value(after, name, labels), :>=, previous, "#{name}#{labels} went down"
        end
      end
    end
  end

  Timing = Struct.new(:run_ns, :wait_ns, :idle_ns, :gc_ns, :duration_ns)

  # A worker's per-route entries: +count+ requests to +route+, each waiting +wait_ns+.
  def route_entries(route, count, wait_ns)
    GVLScope::Breakdown.reset!
    count.times { GVLScope::Breakdown.record(:route, route, Timing.new(1_000, wait_ns, 0, 0, 1_000 + wait_ns)) }
    GVLScope::Breakdown.snapshot
  ensure
    GVLScope::Breakdown.reset!
  end

  def report_breakdown(plugin, index, pid, entries)
    message = Marshal.dump([:breakdown, index, pid, entries.map(&:pack)])
    assert_operator message.bytesize, :<, 65_536
    Process.stub(:clock_gettime, @now) { plugin.__send__(:receive, message) }
  end

  # Workers' per-route series reach the master in their own datagrams: one series per worker and
  # route, or summed over workers with the counters of restarted workers kept.
  def test_per_route_series_travel_from_the_workers
    per_worker = plugin(per_worker: true)
    summed = plugin(per_worker: false)
    [per_worker, summed].each do |plugin|
      report(plugin, 0, 100, totals(held: 1, wall: 10))
      report(plugin, 1, 101, totals(held: 1, wall: 10))
      report_breakdown(plugin, 0, 100, route_entries("UsersController#show", 3, 2_000_000))
      report_breakdown(plugin, 1, 101, route_entries("UsersController#show", 2, 50_000))
    end
    counts = scrape(per_worker).fetch("gvlscope_route_requests_total")
    assert_equal [[{ "worker" => "0", "pid" => "100", "route" => "UsersController#show" }, 3],
                  [{ "worker" => "1", "pid" => "101", "route" => "UsersController#show" }, 2]], counts
    samples = scrape(summed)
    assert_equal [[{ "route" => "UsersController#show" }, 5]], samples.fetch("gvlscope_route_requests_total")
    assert_in_delta 0.0061, value(samples, "gvlscope_route_gvl_wait_seconds_sum", { "route" => "UsersController#show" }), 1e-12
    # 2 ms waits are in [2^20, 2^21) ns: counted from le = 2^21 ns on; 50 us ones from 2^16 ns.
    le = ->(bucket) { { "route" => "UsersController#show", "le" => format("%.9g", 2**bucket * 1e-9) } }
    assert_equal 2, value(samples, "gvlscope_route_gvl_wait_seconds_bucket", le.call(20))
    assert_equal 5, value(samples, "gvlscope_route_gvl_wait_seconds_bucket", le.call(21))
    assert_equal 0, value(samples, "gvlscope_route_gvl_wait_seconds_bucket", le.call(15))

    # Worker 0 restarts: its new process starts from zero, the summed counter does not go down.
    @now += 1
    report(summed, 0, 200, totals(held: 0.1, wall: 1))
    report_breakdown(summed, 0, 200, route_entries("UsersController#show", 1, 0))
    assert_equal 6, value(scrape(summed), "gvlscope_route_requests_total", { "route" => "UsersController#show" })
  end

  def test_per_worker_series_show_live_workers_only
    plugin = plugin(per_worker: true)
    report(plugin, 0, 100, totals(held: 2, wall: 10))
    report(plugin, 1, 101, totals(held: 1, wall: 10))
    report(plugin, 0, 200, totals(held: 0.5, wall: 1))
    held = scrape(plugin).fetch("gvlscope_gvl_held_seconds_total")
    assert_equal [[{ "worker" => "0", "pid" => "200" }, 0.5], [{ "worker" => "1", "pid" => "101" }, 1.0]], held
    @now += GVLScope::PumaPlugin::STALE_AFTER + 1
    report(plugin, 0, 200, totals(held: 0.75, wall: 7))
    assert_equal [[{ "worker" => "0", "pid" => "200" }, 0.75]], scrape(plugin).fetch("gvlscope_gvl_held_seconds_total")
  end

  # The datagram path as in a cluster (the master's receiver thread, a worker's send), in one
  # process: the plugin is also the worker at index 0.
  def with_channel(per_worker: true)
    lines = []
    master = GVLScope::PumaPlugin.new({ prometheus_per_worker: per_worker, log_interval: 0 }, log: lines.method(:<<),
                                                                                           clustered: true)
    master.before_workers
    master.instance_variable_set(:@index, 0) # the worker's side of the same object
    GVLScope::Metrics.enable
    yield master, lines
  ensure
    GVLScope::Metrics.disable if GVLScope::Metrics.enabled?
    master.instance_variable_get(:@outbox)&.close
    master.instance_variable_get(:@inbox)&.close
  end

  # Scrapes until +done+ holds (the receiver thread reads the datagrams when it gets to run).
  def scrape_until(plugin, &done)
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 30
    loop do
      samples = PrometheusText.parse(plugin.exposition).values.group_by(&:first)
                              .transform_values { |rows| rows.map { |_, labels, value| [labels, value] } }
      return samples if done.call(samples) || Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline

      sleep 0.05
    end
  end

  def dropped(samples) = value(samples, GVLScope::PumaPlugin::DROPPED)

  # 100 routes of 3 KB labels (a route function's, or labels before they were capped) and a
  # legitimate one: 40 such series made a 120 KB datagram that the master read cut, and dropped
  # without a word, with the legitimate route in it.
  def test_long_labels_are_sliced_into_datagrams_the_master_reads_whole
    GVLScope::Breakdown.reset!
    timing = Timing.new(1_000, 0, 0, 0, 1_000)
    GVLScope::Breakdown.record(:route, "UsersController#show", timing)
    100.times { |i| GVLScope::Breakdown.record(:route, "GET /#{i}#{'a' * 3000}", timing) }
    with_channel do |plugin, lines|
      plugin.__send__(:send_totals, GVLScope::Metrics.snapshot)
      samples = scrape_until(plugin) { |s| s.fetch("gvlscope_route_requests_total", []).size == 101 }
      routes = samples.fetch("gvlscope_route_requests_total").map { |labels, _| labels["route"] }
      assert_includes routes, "UsersController#show"
      assert_equal 101, routes.size
      assert_equal 0, dropped(samples)
      assert_empty lines
    end
  ensure
    GVLScope::Breakdown.reset!
  end

  # A datagram read cut, one that is not a report, and a series too large for any datagram: each
  # counted (the first one logged), and the reports around them still read.
  def test_reports_that_cannot_travel_are_counted_never_silently_dropped
    GVLScope::Breakdown.reset!
    timing = Timing.new(1_000, 0, 0, 0, 1_000)
    GVLScope::Breakdown.record(:route, "UsersController#show", timing)
    GVLScope::Breakdown.record(:route, "x" * GVLScope::PumaPlugin::MAX_DATAGRAM_BYTES, timing)
    with_channel do |plugin, lines|
      outbox = plugin.instance_variable_get(:@outbox)
      outbox.send(Marshal.dump([:breakdown, 0, 1, [["x" * 70_000]]]), 0)
      outbox.send("not a report", 0)
      plugin.__send__(:send_totals, GVLScope::Metrics.snapshot) # the large series is counted by the next totals
      plugin.__send__(:send_totals, GVLScope::Metrics.snapshot)
      samples = scrape_until(plugin) { |s| dropped(s) == 3 }
      assert_equal 3, dropped(samples)
      assert_equal [[{ "worker" => "0", "pid" => Process.pid.to_s, "route" => "UsersController#show" }, 1]],
                   samples.fetch("gvlscope_route_requests_total")
      assert_equal 1, lines.size, lines.inspect
      assert_match(/a worker's report to the master was dropped \(65536 bytes read of a longer datagram\)/, lines.first)
    end
  ensure
    GVLScope::Breakdown.reset!
  end
end
