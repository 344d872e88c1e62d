# frozen_string_literal: true

require "test_helper"
require "gvlscope"

# GVLScope::Counters (lib/gvlscope/support/counters.rb) and the records the recorder declares once
# in C (ext/gvlscope/metrics.h, request_timing.h) that Ruby builds its Structs from.
class CountersTest < Minitest::Test
  Counters = GVLScope::Counters

  def counters(run, wait, idle, gc, releases = 0)
    Counters.new(run_ns: run, wait_ns: wait, idle_ns: idle, gc_ns: gc, releases: releases)
  end

  def test_add_subtract_and_the_sums
    a = counters(30, 10, 50, 10, 4)
    b = counters(5, 1, 2, 3, 1)
    assert_equal counters(35, 11, 52, 13, 5), a + b
    assert_equal counters(25, 9, 48, 7, 3), a - b
    assert_equal 40, a.held_ns
    assert_equal 100, a.total_ns
    assert_in_delta 0.4, a.held_ratio
    assert_in_delta 0.1, a.wait_ratio
    assert_in_delta 0.5, a.idle_ratio
    assert_in_delta 0.2, a.held_ratio(200)
    assert_equal 0.0, Counters::ZERO.held_ratio # an empty interval: no share, no division by zero
    assert_equal a, Counters.of(a)
  end

  # Rows of two snapshots: one still there subtracts its earlier self, one gone since moved into
  # the exited row with what it had counted before (taken back out), one new counts whole.
  def test_interval_rows_by_serial
    row = Struct.new(:serial, :run_ns, :longest_hold_ns)
    subtract = ->(now, before) { row.new(**Counters.subtract(now.to_h, before, %i[run_ns longest_hold_ns], %i[longest_hold_ns])) }
    earlier = [row.new(1, 10, 7), row.new(2, 20, 9)]
    later = [row.new(1, 15, 8), row.new(3, 4, 1)]
    rows, exited = Counters.interval_rows(later, row.new(0, 25 + 30, 9), earlier, row.new(0, 30, 5), &subtract)
    assert_equal [row.new(1, 5, 8), row.new(3, 4, 1)], rows
    assert_equal row.new(0, 5, 9), exited # the 20 thread 2 counted before the interval is not the interval's
    assert_equal [[row.new(1, 5, 8)], nil], Counters.interval_rows([later[0]], nil, [earlier[0]], row.new(0, 1, 1), &subtract)
  end

  # Each record answers held_ns from its own run and GC time, through the one definition.
  def test_records_share_the_sums
    thread_row = GVLScope::Metrics::ThreadRow.new(name: "t", run_ns: 3, wait_ns: 1, idle_ns: 2, gc_ns: 4, released_blocking: 1,
                                                  released_preempted: 2, released_exit: 0)
    assert_equal counters(3, 1, 2, 4, 3), thread_row.counters
    entry = GVLScope::Breakdown::Entry.new(run_ns: 3, wait_ns: 1, idle_ns: 2, gc_ns: 4)
    assert_equal 7, entry.held_ns
    live_row = GVLScope::Live::Snapshot::ThreadRow.new(run_ns: 3, wait_ns: 1, idle_ns: 2, gc_ns: 4, released_blocking: 1,
                                                       released_preempted: 0, released_exit: 1)
    assert_equal counters(3, 1, 2, 4, 2), live_row.counters
    timing = GVLScope::RequestTiming.new.finish!
    assert_equal timing.run_ns + timing.gc_ns, timing.held_ns
  end

  # The thread row's fields come from metrics.h's list; a snapshot file keeps its version-1 order.
  def test_thread_rows_from_the_declaration
    assert_equal %i[serial ractor_id state exited], GVLScope::Native::THREAD_ROW - GVLScope::Native::THREAD_COUNTERS
    assert_equal [:name, *GVLScope::Native::THREAD_ROW], GVLScope::Metrics::ThreadRow.members
    assert_equal %i[longest_hold_ns longest_wait_ns], GVLScope::Native::MAXIMUM_COUNTERS
    assert_equal %i[serial label ractor_id state exited run_ns wait_ns idle_ns gc_ns holds waits longest_hold_ns
                    longest_wait_ns released_blocking released_preempted released_exit code io_overlap_wait_ns loop],
                 GVLScope::Live::Snapshot::THREAD_FIELDS
  end

  # A request's values (request_timing.h): each a series' sum and a RequestTiming reader.
  def test_request_values_from_the_declaration
    values = GVLScope::Native::BreakdownSeries::FIELDS - %i[count sample_rate]
    assert_equal %i[run_ns wait_ns idle_ns gc_ns duration_ns pickup_wait_ns io_overlap_wait_ns queue_latency_ns loop_wait_ns
                    releases], values
    timing = GVLScope::RequestTiming.new.finish!
    values.each { |value| assert_respond_to timing, value }
    assert_nil timing.queue_latency_ns # its own reader: nil when not told
  end

  # A request's releases: the times its thread gave the GVL up between its start and its end (each
  # sleep one), as the thread's own counters count them.
  def test_a_request_counts_its_releases
    GVLScope::Metrics.enable
    released = -> { GVLScope::Metrics.current_thread.releases }
    before = released.()
    timing = GVLScope::RequestTiming.start
    3.times { sleep 0.001 }
    timing.finish!
    after = released.()
    assert_operator timing.releases, :>=, 3
    assert_operator timing.releases, :<=, after - before
    assert_equal timing.releases, timing.counters.releases
  ensure
    GVLScope::Metrics.disable
  end
end
