# frozen_string_literal: true

require "test_helper"

# The registry keeps the Thread objects it knows alive until their names and counters are read:
# a GC between a thread's death and the next snapshot must not leave a dangling reference.
class RegistryGCTest < Minitest::Test
  def test_exited_threads_survive_gc_until_the_snapshot_reads_them
    GVLScope::Metrics.enable
    20.times.map { |n| Thread.new { Thread.current.name = "short-lived #{n}"; sleep 0.001 } }.each(&:join)
    3.times { GC.start(full_mark: true, immediate_sweep: true) }
    GC.compact if GC.respond_to?(:compact)
    names = GVLScope::Metrics.snapshot.threads.map(&:name)
    assert_equal 20, names.count { |name| name.start_with?("short-lived") }
  ensure
    GVLScope::Metrics.disable
  end
end
