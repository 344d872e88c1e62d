# frozen_string_literal: true

require "test_helper"
require "json"

# Issue #5's thread-safety case: 4 Ractors (each with its own GVL, their hooks running at once on
# different native threads) of 8 threads each, handing the GVL to each other for at least 2 s while
# the main Ractor takes snapshots. Counters must only grow, the waiting gauge must stay within the number
# of threads that exist, and once everything has stopped the totals must add up exactly: the
# gauge back at 0 (it is readied - acquired - abandoned, so one lost update would show forever),
# every hold and wait in the histograms. In a child process (Ractor warnings; a CRuby hang is
# killed by run_ruby's timeout).
class MetricsRactorTest < Minitest::Test
  include GVLScopeTestHelper

  MONOTONIC = %i[holds waits run_ns wait_ns idle_ns released_blocking released_preempted].freeze

  CHILD = <<~RUBY
    require "gvlscope"
    require "json"
    require #{RACTOR_RESULT.inspect}
    Warning[:experimental] = false
    clock = -> { Process.clock_gettime(Process::CLOCK_MONOTONIC) }
    GVLScope::Metrics.enable
    # Thread.pass with 8 threads per Ractor: each pass hands the GVL over (SUSPENDED, READY,
    # RESUMED). Not real IO: sysread of /dev/zero, sleep and pipe IO in threads of non-main Ractors
    # hang CRuby itself now and then, with or without gvlscope (seen here with /dev/zero on 3.3.8).
    # The workers stop once the main Ractor has its samples and sets GVLSCOPE_TEST_STOP (ENV is
    # shared by all Ractors; read every 100 passes): not at a fixed time, because on a loaded
    # machine this thread may get few samples in any fixed time; and not before the last sample:
    # a thread that exits before a snapshot is a row of that snapshot only, then part of `exited`
    # (all exited threads together, ractor_id 0), so a worker gone before the last sample would
    # count for no Ractor in the final snapshot. Not a message from the main Ractor to stop:
    # Ractor#send to a Ractor whose threads switch can deadlock CRuby 3.3.8 (the sender waits for
    # that Ractor's scheduler lock, whose holder waits for a GC barrier).
    ractors = 4.times.map do
      Ractor.new do
        8.times.map do
          Thread.new do
            calls = 0
            until (calls % 100).zero? && ENV["GVLSCOPE_TEST_STOP"]
              Thread.pass
              calls += 1
            end
            calls
          end
        end.sum(&:value)
      end
    end
    # At least 2 s of samples and 20 that saw hand-overs since the one before (at most 30 s).
    started = clock.call
    samples = []
    moved = 0
    while (clock.call < started + 2 || moved < 20) && clock.call < started + 30
      s = GVLScope::Metrics.snapshot
      moved += 1 if samples.any? && s.holds > samples.last[:holds]
      samples << #{MONOTONIC.inspect}.to_h { |c| [c, s.public_send(c)] }.merge(waiting: s.waiting_threads)
      sleep 0.01
    end
    ENV["GVLSCOPE_TEST_STOP"] = "1"
    calls = ractors.sum { |ractor| RactorResult.of(ractor) }
    final = GVLScope::Metrics.snapshot
    puts JSON.generate(
      samples: samples, calls: calls, waiting: final.waiting_threads, holds: final.holds, waits: final.waits,
      hold_histogram: final.hold_histogram.sum, wait_histogram: final.wait_histogram.sum,
      waiters_histogram: final.waiters_at_acquire_histogram.sum, held_by_ractor: final.held_ratio_by_ractor,
      waits_by_ractor: final.all_rows.group_by(&:ractor_id).transform_values { |rows| rows.sum(&:waits) }
    )
  RUBY

  def test_four_ractors_of_eight_threads_with_concurrent_snapshots
    out, err, status = run_ruby(CHILD, timeout: 60)
    assert status.success?, err
    result = JSON.parse(out.lines.last, symbolize_names: true)
    samples = result[:samples]
    moved = samples.each_cons(2).count { |before, after| after[:holds] > before[:holds] }
    assert_operator moved, :>=, 20, "snapshots taken while the Ractors handed the GVL over: #{samples.size} in all"

    samples.each_cons(2) do |before, after|
      MONOTONIC.each { |counter| assert_operator after[counter], :>=, before[counter], "#{counter} went back: #{before} -> #{after}" }
    end
    # 37 threads exist (4 Ractors of 8 workers and their main thread, and the main thread): no
    # more can wait, and never fewer than none.
    samples.each { |sample| assert_includes 0..37, sample[:waiting], sample.inspect }

    assert_operator result[:calls], :>=, 1000, "GVL hand-overs"
    assert_equal 0, result[:waiting], "waiting gauge once every thread stopped"
    assert_equal result[:holds], result[:hold_histogram]
    assert_equal result[:waits], result[:wait_histogram]
    assert_equal result[:waits], result[:waiters_histogram]
    # Each Ractor has its own GVL: held at most all of the wall time (a little slack for the
    # snapshot's clock reads), and every worker Ractor acquired it many times.
    worker_ractors = result[:held_by_ractor].keys.map { |id| id.to_s.to_i }.reject { |id| id <= 1 }
    assert_operator worker_ractors.size, :>=, 4, result[:held_by_ractor].inspect
    result[:held_by_ractor].each_value { |ratio| assert_operator ratio, :<=, 1.01, result[:held_by_ractor].inspect }
    worker_ractors.each { |id| assert_operator result[:waits_by_ractor][id.to_s.to_sym], :>=, 100, result[:waits_by_ractor].inspect }
  end
end
