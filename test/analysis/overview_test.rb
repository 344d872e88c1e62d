# frozen_string_literal: true

require "test_helper"
require "gvlscope/analysis"
require "support/reference_timeline"

# Analysis::Overview (each thread's run/wait/idle/gc ns per bin) and Report#detail (the intervals
# of a window), on the recorded fixtures: what the HTML report draws zoomed out and zoomed in.
class OverviewTest < Minitest::Test
  include GVLScopeTestHelper

  FIXTURES = %w[convoy hog mixed counters ractor].map { |name| File.join(ROOT, "test/fixtures/traces/#{name}.gvl") }

  def report(path) = GVLScope::Analysis::Report.new(GVLScope::Model.timeline(path))

  # The bins add up to the thread table's totals, to the ns, and no bin holds more than a bin.
  def test_the_bins_add_up_to_each_threads_totals
    FIXTURES.each do |path|
      report = report(path)
      [1, 7, 2000].each do |bins|
        overview = report.overview(bins: bins)
        assert_equal bins, overview.bins
        assert_operator overview.bin_ns * bins, :>=, report.duration_ns
        report.all_rows.each do |row|
          lane = overview.lane(row.serial)
          assert_equal 4 * bins, lane.size
          totals = (0...4).map { |state| lane.each_slice(4).sum { |bin| bin[state] } }
          assert_equal [row.run_ns, row.wait_ns, row.idle_ns, row.gc_ns], totals, "#{File.basename(path)} #{row.label}, #{bins} bins"
          lane.each_slice(4) { |bin| assert_operator bin.sum, :<=, overview.bin_ns }
        end
      end
    end
  end

  # (The reference's binning, test/support/reference_timeline.rb; EngineTest checks the engine's
  # lanes against it.)
  def test_an_interval_over_several_bins_is_split_at_their_edges
    overview = ReferenceOverview.new(1000, bins: 10) # bins of 100 ns
    overview.add(7, :wait, 150, 420)
    overview.add(7, :run, 420, 430)
    overview.add(7, :exited, 430, 430)
    overview.add(7, :started, 0, 150) # a moment: not counted
    waits = overview.lane(7).each_slice(4).map { |bin| bin[1] }
    assert_equal [0, 50, 100, 100, 20, 0, 0, 0, 0, 0], waits
    assert_equal 10, overview.lane(7)[4 * 4]
    assert_equal [0] * 40, overview.lane(8)
    assert_equal overview.lane(7).map { |ns| 3 * ns }, overview.sum([7, 8, 7, 7])
  end

  # A window's intervals are those of every thread that overlap it, by start; cut at +limit+,
  # they are the first ones, so every interval that starts before the last one returned is there.
  def test_detail_is_every_interval_overlapping_a_window_in_time_order
    report = report(File.join(ROOT, "test/fixtures/traces/mixed.gvl"))
    all = ReferenceTimeline.open(report.file.path).threads.values.flat_map(&:intervals)
    duration = report.duration_ns
    windows = [[0, duration], [duration / 3, duration / 2], [duration / 2, duration / 2 + 1_000_000]]
    windows.each do |from, to|
      expected = all.select { |i| i.start_ns < to && (i.end_ns > from || i.start_ns >= from) }
      detail = report.detail(from, to, limit: 1_000_000)
      assert_equal expected.map(&:to_a).tally, detail.map(&:to_a).tally
      assert_equal detail.map(&:start_ns).sort, detail.map(&:start_ns)
      refute_empty detail
    end
    assert_equal all.size, report.detail(0, duration, limit: all.size + 1).size

    cut = report.detail(0, duration, limit: 100)
    assert_equal 100, cut.size
    before_last = all.select { |i| i.start_ns < cut.last.start_ns }
    assert_empty before_last.map(&:to_a) - cut.map(&:to_a), "an interval that starts before the last one returned is missing"
    # Each thread's intervals come in its own order (the viewer's search needs their ends sorted).
    cut.group_by(&:thread).each_value { |mine| assert_equal mine.map(&:end_ns).sort, mine.map(&:end_ns) }
  end
end
