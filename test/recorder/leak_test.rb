# frozen_string_literal: true

require "test_helper"

# Slots (and the Thread objects the registry keeps for their names) must not outlive their threads
# when the hook was off at a thread's exit (no EXITED to see): 20,000 threads that each called
# GVLScope.measure kept 20,001 Threads alive (446 MB), and start/stop cycles grew without bound.
# Counts, not time or RSS: the registry's size and the Thread objects left after a full GC.
class LeakTest < Minitest::Test
  include GVLScopeTestHelper

  def test_threads_that_called_measure_are_forgotten
    out, err, status = run_ruby(<<~RUBY, timeout: 120)
      require "gvlscope"
      2000.times { Thread.new { GVLScope.measure { 1 + 1 } }.join }
      GVLScope.measure { 1 } # the last thread's slot goes at the next enable or disable
      GC.start(full_mark: true, immediate_sweep: true)
      puts GVLScope::Native.debug_registry_size, ObjectSpace.each_object(Thread).count
    RUBY
    assert status.success?, err
    registry, threads = out.lines.map(&:to_i)
    assert_equal 1, registry, "slots left: only the main thread's"
    # The main thread, and at most a few dead Threads the conservative GC still sees on the stack.
    assert_operator threads, :<=, 5, "Thread objects alive after 2000 measured threads ended"
  end

  def test_start_stop_cycles_with_threads_dying_between_them_stay_bounded
    Dir.mktmpdir("gvlscope-leak") do |dir|
      out, err, status = run_ruby(<<~RUBY, dir, timeout: 120)
        require "gvlscope"
        queue = Queue.new
        thread = nil
        sizes = 500.times.map do |i|
          path = File.join(ARGV[0], "t.gvl")
          GVLScope.start(path, buffer_bytes: 1 << 20)
          thread&.join
          thread = Thread.new { queue.pop } # lives across the stop, dies while the hook is off
          GVLScope.stop
          queue << 1
          File.delete(path)
          GVLScope::Native.debug_registry_size
        end
        puts sizes.max
      RUBY
      assert status.success?, err
      # The main thread, the thread of this cycle and at most the last cycle's, not yet joined.
      assert_operator out.to_i, :<=, 3, "registry slots after 500 start/stop cycles"
    end
  end
end
