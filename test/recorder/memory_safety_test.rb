# frozen_string_literal: true

require "test_helper"

# Races between the hook (on any native thread, without the GVL) and the snapshots that read and
# free thread slots (issue 16). Debug entry points (ext/gvlscope/debug.c) widen the windows so that
# the races happen on every run instead of once in a while under load.
class MemorySafetyTest < Minitest::Test
  include GVLScopeTestHelper

  # A snapshot reads a slot while the hook about its thread writes it. A half-written slot (run_ns
  # already grown by the hold that just ended, the state still "run") counts the hold twice, and
  # the next reading is lower: "run_ns went back" in test/recorder/metrics_ractor_test.rb under load.
  def test_snapshots_of_a_slot_being_written_never_go_back
    rounds = Array.new(5) { GVLScope::Native.debug_metrics_race(2_000_000, false) }
    assert_equal [2_000_000] * 5, rounds.map(&:first)
    # A half-written slot is read this way in every round: 77-106 per round of 2,000,000 reads
    # with the seqlock's check taken out (27-39 per round in the test below). A consistent reading can still
    # run ahead of an event by the time the writer's stores take to become visible after its clock
    # read: ~1.4 us normally, more when the machine stalls the writer's CPU just then. Those stalls
    # come in bursts with other load (4 and 11 in a run under ASan beside other tests), so the
    # quietest of the rounds is judged.
    regressions = rounds.map(&:last)
    assert_operator regressions.min, :<=, 3, "readings lower than the one before (a half-written slot counted twice), per round: #{regressions.inspect}"
  end

  # A release after a long hold while others wait may be a timeslice switch: READY then counts the
  # time since SUSPENDED as wait, not idle. A snapshot between the two (a loaded machine kept the
  # thread off the CPU for 32 ms there) had counted it as idle, and the next one showed idle_ns
  # lower: "idle_ns went back" in test/recorder/metrics_ractor_test.rb. Here every release is such a switch
  # and lasts 20-80 us.
  def test_snapshots_during_a_preemption_never_go_back
    rounds = Array.new(4) { GVLScope::Native.debug_metrics_race(500_000, true) }
    assert_equal [500_000] * 4, rounds.map(&:first)
    # Same allowance as above for a reading that runs ahead of an event in flight.
    regressions = rounds.map(&:last)
    assert_operator regressions.min, :<=, 3, "readings lower than the one before (idle moved to wait), per round: #{regressions.inspect}"
  end

  # EXITED runs without the GVL, maybe in another Ractor, while a snapshot on the main thread may
  # retire the exited thread's slot and free it. With the EXITED hook held up 20 ms, every thread's
  # exit overlaps several snapshots: none may free a slot its hook is still using.
  def test_a_snapshot_never_frees_a_slot_an_exited_hook_still_uses
    out, err, status = run_ruby(<<~RUBY, timeout: 60)
      require "gvlscope"
      GVLScope::Native.debug_exited_delay_us = 20_000
      GVLScope::Metrics.enable
      threads = 20.times.map { Thread.new { 1 + 1 } }
      snapshots = 0
      until threads.none?(&:alive?) && snapshots > 10
        GVLScope::Metrics.snapshot
        snapshots += 1
        sleep 0.002
      end
      threads.each(&:join)
      sleep 0.05 # every EXITED hook has finished
      GVLScope::Metrics.snapshot
      GVLScope::Metrics.snapshot
      puts GVLScope::Native.debug_freed_slot_writes, GVLScope::Native.debug_registry_size
    RUBY
    assert status.success?, err
    freed_writes, registry = out.lines.map(&:to_i)
    assert_equal 0, freed_writes, "EXITED hooks that wrote a slot a snapshot had freed"
    # The exited threads' slots were pruned in the end: only the main thread's is left.
    assert_equal 1, registry
  end
end
