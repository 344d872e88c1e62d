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
end
