# frozen_string_literal: true

require "test_helper"
require "gvlscope/analysis/advisor"
require_relative "../../research/thread_sweep_model"

# The simulated GVL of research/thread_sweep_model.rb against what can be worked out by hand, and
# against the advisor's mean value analysis where the two models are the same model.
class ThreadSweepModelTest < Minitest::Test
  Model = ThreadSweepModel

  # No IO: the GVL is busy from the first request on, so any count serves 1 / D.
  def test_without_io_every_count_serves_one_gvls_worth
    [1, 2, 7].each do |threads|
      assert_in_delta 250.0, Model.requests_per_second(threads, [[[:hold, 4.0]]], requests: 2_000, exponential: false), 1e-6
    end
  end

  # Exact times, one endpoint: T threads go round D + Z without meeting while T * D <= D + Z (they
  # settle into turns), so T / (D + Z); past that the GVL is the limit, 1 / D.
  def test_exact_times_serve_t_over_d_plus_z_until_the_gvl_is_full
    io = [[[:hold, 1.0], [:io, 3.0]]]
    { 1 => 250.0, 2 => 500.0, 4 => 1000.0, 6 => 1000.0 }.each do |threads, expected|
      assert_in_delta expected, Model.requests_per_second(threads, io, requests: 4_000, exponential: false), 1e-6, "#{threads} threads"
    end
  end

  # Exponential times, one endpoint: the advisor's model, solved exactly by mean value analysis.
  # 40,000 simulated requests give the rate within ~1.5 % (its standard error is under 0.5 %).
  def test_exponential_times_agree_with_mean_value_analysis
    curve = GVLScope::Analysis::Advisor.curve(2.0, 6.0, 8)
    [1, 3, 5, 8].each do |threads|
      expected = curve[threads - 1].busy / 2.0 * 1000
      got = Model.requests_per_second(threads, [[[:hold, 2.0], [:io, 6.0]]], requests: 40_000)
      assert_in_delta expected, got, expected * 0.015, "#{threads} threads"
    end
  end

  # Two endpoints with the same mean hold and IO as one: the mean is the same, the throughput is
  # not. A thread on the CPU endpoint brings no IO to overlap, so at a count where one class would
  # keep the GVL busy the mix still falls short; enough threads reach the same limit, 1 / mean D.
  def test_a_mix_needs_more_threads_than_its_mean
    mean = [[[:hold, 2.5], [:io, 4.5]]]
    mix = [[[:hold, 4.0]], [[:hold, 1.0], [:io, 9.0]]]
    at4 = [mean, mix].map { |endpoints| Model.requests_per_second(4, endpoints, exponential: false) }
    assert_operator at4[1], :<, at4[0] * 0.97, "4 threads: #{at4.inspect}"
    at16 = [mean, mix].map { |endpoints| Model.requests_per_second(16, endpoints, exponential: false) }
    at16.each { |rate| assert_in_delta 400.0, rate, 4.0, at16.inspect }
  end

  def test_the_knee_is_the_fewest_counts_at_the_target
    shares = { 1 => [10, 0.5], 2 => [19, 0.95], 3 => [20, 1.0] }
    assert_equal 2, Model.knee(shares)
    assert_nil Model.knee({ 1 => [1, 0.5] })
  end
end
