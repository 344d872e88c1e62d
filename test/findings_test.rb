# frozen_string_literal: true

require "test_helper"
require "support/scripted_timeline"
require "gvlscope/analysis"

# What the finding rules read (ThreadStats rows, the Blame) on scripted timelines whose every
# interval is known, so each number is exact.
class FindingsTest < Minitest::Test
  MS = 1_000_000

  # a: wait 0-10, run 10-30, idle 30-40, wait 40-70 (after a blocking call, slow: >= 25 ms),
  #    run 70-80, gc 80-90, run 90-100, idle 100-110, wait 110-115 (after a blocking call, fast),
  #    run 115-200.
  # b: wait 0-30, run 30-70, idle 70-75, wait 75-100 (after a blocking call, slow; a collects
  #    80-90 of it), run 100-110, idle 110-200.
  def two_threads
    ScriptedTimeline.timeline([
      [0, "a", :started], [0, "a", :ready], [0, "b", :started], [0, "b", :ready],
      [10, "a", :resumed], [30, "a", :suspended], [30, "b", :resumed], [40, "a", :ready],
      [70, "b", :suspended], [70, "a", :resumed], [75, "b", :ready], [80, "a", :gc_enter], [90, "a", :gc_exit],
      [100, "a", :suspended], [100, "b", :resumed], [110, "a", :ready], [110, "b", :suspended],
      [115, "a", :resumed]
    ], end_ms: 200)
  end

  def test_rows_carry_what_the_rules_need
    report = GVLScope::Analysis::Report.new(two_threads)
    a, b = report.all_rows
    assert_equal [[115 * MS, 200 * MS], [40 * MS, 70 * MS]], [a.longest_run, a.longest_wait]
    assert_equal [2, 1, 35 * MS, 30 * MS, [40 * MS, 70 * MS]],
                 [a.blocking_waits, a.slow_blocking_waits, a.blocking_wait_ns, a.median_slow_blocking_wait_ns,
                  a.longest_slow_blocking_wait]
    assert_equal 10 * MS, a.median_wait_ns # of 10, 30, 5 ms
    assert_equal 3, a.holds # the GC splits a hold's run, it stays one hold
    assert_equal [1, 1, 25 * MS, 25 * MS, [75 * MS, 100 * MS]],
                 [b.blocking_waits, b.slow_blocking_waits, b.blocking_wait_ns, b.median_slow_blocking_wait_ns,
                  b.longest_slow_blocking_wait]
    assert_equal [30 * MS, 70 * MS], b.longest_run
    assert_equal 25 * MS, report.all_waits_median_ns # of 10, 30, 5, 30, 25 ms
  end

  def test_blame_counts_the_waiting_during_another_threads_gc
    blame = GVLScope::Analysis::Report.new(two_threads).blame
    a, b = 1, 2
    assert_equal({ b => 10 * MS }, blame.during_gc.to_h)
    assert_equal({ a => 25 * MS }, blame.after_blocking[b].to_h) # a held it (running or collecting) all along
    assert_equal({ b => 30 * MS, GVLScope::Analysis::Blame::HAND_OFF => 5 * MS }, blame.after_blocking[a].to_h)
  end

  def test_a_thread_without_runs_or_waits_has_nil_spans_and_zero_medians
    timeline = ScriptedTimeline.timeline([[0, "a", :started], [0, "a", :ready], [0, "a", :resumed],
                                          [5, "a", :suspended], [0, "b", :started]], end_ms: 10)
    b = GVLScope::Analysis::Report.new(timeline).all_rows.last
    assert_equal [nil, nil, nil, 0, 0, 0], [b.longest_run, b.longest_wait, b.longest_slow_blocking_wait, b.median_wait_ns,
                                            b.median_slow_blocking_wait_ns, b.blocking_waits]
  end
end
