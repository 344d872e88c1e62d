# frozen_string_literal: true

# What models of one GVL predict for the thread-sweep scenario's mixes (lab/thread_sweep.rb), set
# beside what the sweep measured: `ruby research/thread_sweep_model.rb`. docs/advise.md ("Why the mixed
# mix missed") reads the table it prints.
#
# The model is the advisor's for several kinds of request (GVLScope::Analysis::GVLSimulation): T
# threads, each request one of the mix's endpoints at random, holding the GVL for the endpoint's
# Ruby, then off it for its IO, the GVL granted in the order asked for (a hold shorter than the
# 100 ms timeslice is never preempted). With one endpoint and exponential times it is the model
# `gvlscope advise` solves by mean value analysis (Advisor.curve); with several it keeps what the
# mean loses: which requests bring IO with their hold.
require_relative "../lib/gvlscope/analysis/gvl_simulation"

module ThreadSweepModel
  module_function

  # Requests per second with +threads+ threads. +endpoints+: arrays of segments ([:hold, ms], then
  # optionally [:io, ms]), one picked at random per request. +exponential+: draw each segment's
  # time from an exponential of its mean (else every segment takes exactly its time).
  def requests_per_second(threads, endpoints, requests: GVLScope::Analysis::GVLSimulation::REQUESTS, exponential: true, seed: 1)
    kinds = endpoints.map do |segments|
      unless segments.map(&:first).uniq == [:hold] || segments.map(&:first) == %i[hold io]
        raise ArgumentError, "an endpoint is a hold, then optionally IO: #{segments.inspect}"
      end

      GVLScope::Analysis::GVLSimulation::Kind.new(share: 1, hold_ns: segments.sum { |kind, ms| kind == :hold ? ms : 0 },
                                                  idle_ns: segments.sum { |kind, ms| kind == :io ? ms : 0 })
    end
    simulation = GVLScope::Analysis::GVLSimulation.new(kinds, requests: requests, seed: seed, exponential: exponential)
    simulation.run(threads).busy / simulation.mean_hold_ns * 1000 # times are in ms here
  end

  # requests/s for each count in +counts+, and each as a share of the best of them.
  def curve(counts, endpoints, **options)
    rates = counts.to_h { |threads| [threads, requests_per_second(threads, endpoints, **options)] }
    best = rates.values.max
    rates.transform_values { |rate| [rate, rate / best] }
  end

  # The fewest of +counts+ reaching +target+ of the best: the knee's throughput half.
  def knee(shares, target = 0.95) = shares.find { |_threads, (_rate, share)| share >= target }&.first
end

if $PROGRAM_NAME == __FILE__
  require_relative "../lib/gvlscope/analysis/advisor"

  # What the sweep of 2026-11-26 18:31 UTC measured (docs/lab.md, "thread-sweep"; Ruby 3.3.8, Puma
  # 8.0.2, wrk -c 32): requests/s per count (medians of 5 rounds) and the GVL run per request read
  # live at 5 threads (the Ruby of lab/thread_sweep_mixes.rb plus Puma's own). Mixed requests are
  # half CPU (4 ms of Ruby), half IO (1 ms of Ruby, 9 ms from the delay server).
  COUNTS = [1, 2, 3, 4, 5, 6, 8, 9, 11, 12, 16].freeze
  MEASURED = {
    "cpu-heavy" => { 1 => 200, 2 => 170, 3 => 162, 4 => 183, 6 => 189, 8 => 161, 12 => 170, 16 => 193 },
    "io-heavy" => { 1 => 87, 2 => 177, 3 => 261, 4 => 346, 6 => 481, 8 => 545, 9 => 619, 11 => 642, 12 => 642, 16 => 617 },
    "mixed" => { 1 => 124, 2 => 208, 3 => 255, 4 => 274, 6 => 299, 8 => 304, 12 => 291, 16 => 291 },
  }.freeze
  CPU_RUN_MS = 4.89 # cpu-heavy: GVL run per request
  IO_RUN_MS = 1.64  # io-heavy: GVL run per request
  IO_MS = 9.0
  MIXED_IDLE_MS = 2.3 # mixed: idle per request read live at 5 threads (the advisor's Z)

  cpu = [[:hold, CPU_RUN_MS]]
  io = [[:hold, IO_RUN_MS], [:io, IO_MS]]
  mixed_run = (CPU_RUN_MS + IO_RUN_MS) / 2
  # One class: Advisor.curve (mean value analysis, exponential times), throughput share of the best.
  one_class = lambda do |d, z|
    points = GVLScope::Analysis::Advisor.curve(d, z, COUNTS.max)
    best = points.map(&:busy).max
    COUNTS.to_h { |threads| [threads, [points[threads - 1].busy / d * 1000, points[threads - 1].busy / best]] }
  end
  models = {
    "one class, idle as read at 5 threads (the advisor)" => { "mixed" => one_class.(mixed_run, MIXED_IDLE_MS) },
    "one class, the IO the requests do" => { "mixed" => one_class.(mixed_run, IO_MS / 2) },
    "endpoints apart, exponential times" => {
      "cpu-heavy" => ThreadSweepModel.curve(COUNTS, [cpu]), "io-heavy" => ThreadSweepModel.curve(COUNTS, [io]),
      "mixed" => ThreadSweepModel.curve(COUNTS, [cpu, io])
    },
    "endpoints apart, exact times" => {
      "cpu-heavy" => ThreadSweepModel.curve(COUNTS, [cpu], exponential: false),
      "io-heavy" => ThreadSweepModel.curve(COUNTS, [io], exponential: false),
      "mixed" => ThreadSweepModel.curve(COUNTS, [cpu, io], exponential: false)
    },
  }
  MEASURED.each do |mix, measured|
    best = measured.values.max
    puts "#{mix}: requests/s per thread count as a share of the best; knee: the fewest threads at 95 % of the best"
    puts "| model | #{COUNTS.join(' | ')} | knee |"
    puts "|---|#{'---:|' * COUNTS.size}---:|"
    shares = COUNTS.to_h { |threads| [threads, measured[threads] && [measured[threads], measured[threads].fdiv(best)]] }.compact
    row = ->(name, points) { "| #{name} | #{COUNTS.map { |t| points[t] ? format('%.0f %%', 100 * points[t][1]) : '' }.join(' | ')} | #{ThreadSweepModel.knee(points)} |" }
    puts row.("measured (medians of 5 rounds)", shares)
    models.each { |name, by_mix| puts row.(name, by_mix[mix]) if by_mix[mix] }
    puts
  end
end
