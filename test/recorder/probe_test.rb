# frozen_string_literal: true

require "test_helper"

class ProbeTest < Minitest::Test
  include GVLScopeTestHelper

  # The first prototype's check is not part of what every `require "gvlscope"` loads.
  def test_probe_loads_on_first_use_only
    out, err, status = run_ruby(<<~RUBY)
      require "gvlscope"
      p $LOADED_FEATURES.grep(%r{gvlscope/recorder/probe}).size
      p GVLScope::Probe.count { nil }.keys
    RUBY
    assert status.success?, err
    assert_equal "0\n[:started, :ready, :resumed, :suspended, :exited]\n", out
  end

  # A thread blocked on a pipe, woken by the main thread's write: it must release the GVL
  # (SUSPENDED), become runnable again (READY) and get the GVL back (RESUMED). It also starts
  # and exits under the hook.
  def test_blocking_read_in_a_second_thread_fires_every_event_kind
    reader, writer = IO.pipe
    counts = GVLScope::Probe.count do
      thread = Thread.new { reader.read(1) }
      sleep 0.05 # let it block in read
      writer.write("x")
      assert_equal "x", thread.value
    end
    assert_equal 1, counts[:started]
    assert_equal 1, counts[:exited]
    assert_operator counts[:ready], :>=, 2, counts.inspect
    assert_operator counts[:resumed], :>=, 2, counts.inspect
    assert_operator counts[:suspended], :>=, 2, counts.inspect
  ensure
    [reader, writer].each { |io| io&.close }
  end

  def test_a_single_thread_doing_nothing_blocking_fires_no_event
    counts = GVLScope::Probe.count { 10_000.times.sum }
    assert_equal({ started: 0, ready: 0, resumed: 0, suspended: 0, exited: 0 }, counts)
  end

  def test_probe_cannot_start_twice_and_stops_cleanly_after_an_exception
    assert_raises(RuntimeError) { GVLScope::Probe.count { raise "boom" } }
    # The hook was removed by the ensure: a new count starts from zero.
    assert_equal 0, GVLScope::Probe.count { nil }[:ready]
    error = assert_raises(RuntimeError) { GVLScope::Probe.count { GVLScope::Probe.count { nil } } }
    assert_match(/already running/, error.message)
  end
end
