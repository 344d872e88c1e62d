# frozen_string_literal: true

require_relative "../test_helper"

# The suite's own checks must be able to fail: assert_consistent once selected a state that no
# longer existed (:running) and passed on any timeline. These feed it timelines built by hand.
class TestHelperTest < Minitest::Test
  include GVLScopeTestHelper

  Interval = Struct.new(:thread, :state, :start_ns, :end_ns)
  ThreadRow = Struct.new(:label, :intervals)
  Timeline = Struct.new(:ractors)

  # +threads+: {label => [[state, start_ns, end_ns], ...]}, all in Ractor 0.
  def timeline(threads)
    Timeline.new({ 0 => threads.map { |label, spans| ThreadRow.new(label, spans.map { |s| Interval.new(label, *s) }) } })
  end

  def test_one_holder_at_a_time_passes
    assert_consistent(timeline("a" => [[:wait, 0, 10], [:run, 10, 1_000_000], [:idle, 1_000_000, 3_000_000]],
                               "b" => [[:wait, 0, 1_000_000], [:run, 1_000_000, 2_000_000], [:gc, 2_000_000, 2_500_000]]))
  end

  def test_two_overlapping_holders_fail
    error = assert_raises(Minitest::Assertion) do
      assert_consistent(timeline("a" => [[:wait, 0, 10], [:run, 10, 2_000_000]],
                                 "b" => [[:wait, 0, 1_000_000], [:run, 1_000_000, 3_000_000]]))
    end
    assert_match(/overlaps/, error.message)
  end

  def test_a_run_overlapping_a_gc_fails
    assert_raises(Minitest::Assertion) do
      assert_consistent(timeline("a" => [[:wait, 0, 10], [:run, 10, 2_000_000]],
                                 "b" => [[:run, 0, 5], [:gc, 1_000_000, 3_000_000]]))
    end
  end

  def test_a_run_not_after_a_wait_fails
    error = assert_raises(Minitest::Assertion) do
      assert_consistent(timeline("a" => [[:idle, 0, 10], [:run, 10, 20]]))
    end
    assert_match(/running after idle/, error.message)
  end

  def test_a_timeline_without_runs_fails
    error = assert_raises(Minitest::Assertion) { assert_consistent(timeline("a" => [[:idle, 0, 10]])) }
    assert_match(/nothing was checked/, error.message)
  end

  def test_a_state_outside_the_vocabulary_fails
    error = assert_raises(Minitest::Assertion) do
      assert_consistent(timeline("a" => [[:wait, 0, 10], [:running, 10, 20]]))
    end
    assert_match(/not in the vocabulary/, error.message)
  end

  def test_vocabulary_states_raises_on_a_state_the_vocabulary_does_not_have
    assert_equal %i[run gc], vocabulary_states(:run, :gc)
    error = assert_raises(ArgumentError) { vocabulary_states(:run, :running) }
    assert_match(/:running/, error.message)
  end
end
