# frozen_string_literal: true

require "test_helper"
require "gvlscope/analysis/advisor"
require "gvlscope/analysis/gvl_simulation"

# The advisor's model for several kinds of work (Analysis::GVLSimulation): against what can be
# worked out by hand, and against mean value analysis where the two are the same model.
class GVLSimulationTest < Minitest::Test
  Simulation = GVLScope::Analysis::GVLSimulation
  Kind = Simulation::Kind

  def kind(share, hold, idle) = Kind.new(share: share, hold_ns: hold, idle_ns: idle)

  # One kind, exponential times: the network mean value analysis solves exactly (Advisor.curve).
  # 60,000 requests per count give the busy share within a point and the wait within 3 %.
  def test_one_kind_is_what_mean_value_analysis_solves
    simulation = Simulation.new([kind(1, 2.0, 6.0)])
    curve = GVLScope::Analysis::Advisor.curve(2.0, 6.0, 8)
    (1..8).each do |threads|
      result = simulation.run(threads)
      expected = curve[threads - 1]
      assert_in_delta expected.busy, result.busy, 0.01, "#{threads} threads"
      assert_in_delta expected.wait_per_demand * 2.0, result.wait_ns, [0.03 * expected.wait_per_demand * 2.0, 1e-9].max,
                      "#{threads} threads"
    end
  end

  # One thread never waits, and keeps the GVL busy D / (D + Z) of the time with the means of all
  # kinds: 0.5 x 4 / (0.5 x 4 + 0.5 x (1 + 9)) = 2 / 7.
  def test_one_thread_is_busy_its_mean_hold_over_its_mean_round
    result = Simulation.new([kind(1, 4.0, 0.0), kind(1, 1.0, 9.0)]).run(1)
    assert_equal 0.0, result.wait_ns
    assert_in_delta 2.5 / 7.0, result.busy, 0.01
  end

  # Exact times: T threads go round D + Z in turns while T x D <= D + Z, so the GVL is busy
  # T x D / (D + Z); past that, always.
  def test_exact_times_fill_the_gvl_in_turns
    simulation = Simulation.new([kind(1, 1.0, 3.0)], requests: 4_000, exponential: false)
    { 1 => 0.25, 2 => 0.5, 4 => 1.0, 6 => 1.0 }.each do |threads, busy|
      assert_in_delta busy, simulation.run(threads).busy, 1e-9, "#{threads} threads"
    end
    # 6 threads for 4 turns: each waits 2 holds per round.
    assert_in_delta 2.0, simulation.run(6).wait_ns, 1e-9
  end

  # The mixed mix of the lab's sweep, as the advisor reads it per endpoint: 4.9 ms of hold and no
  # IO, 1.6 ms of hold and 9 ms of IO. At 4 threads its mean request (3.25 ms, 4.5 ms) keeps the
  # GVL busy 96 % (mean value analysis); the two kinds apart, less: a thread on the CPU kind
  # overlaps no IO. Enough threads fill the GVL either way.
  def test_kinds_apart_need_more_threads_than_their_mean
    mixed = Simulation.new([kind(1, 4.9, 0.0), kind(1, 1.6, 9.0)])
    mean = GVLScope::Analysis::Advisor.curve(3.25, 4.5, 16)
    assert_operator mixed.run(4).busy, :<, mean[3].busy - 0.01
    assert_operator mixed.run(16).busy, :>, 0.99
  end

  # Seeded: the same kinds give the same numbers; other seeds differ by less than a point
  # (the class comment's "about half a point").
  def test_seeded_and_steady_between_seeds
    kinds = [kind(1, 4.9, 0.0), kind(1, 1.6, 9.0)]
    assert_equal Simulation.new(kinds).run(4), Simulation.new(kinds).run(4)
    busy = (1..5).map { |seed| Simulation.new(kinds, seed: seed).run(4).busy }
    assert_operator busy.max - busy.min, :<, 0.01, busy.inspect
  end

  def test_refuses_work_without_holds
    assert_raises(ArgumentError) { Simulation.new([]) }
    assert_raises(ArgumentError) { Simulation.new([kind(0, 1.0, 1.0)]) }
    assert_raises(ArgumentError) { Simulation.new([kind(1, 0.0, 1.0)]) }
  end
end
