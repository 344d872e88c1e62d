# frozen_string_literal: true

require_relative "../support/units"

module GVLScope
  module Lab
    # The thread-sweep scenario's judgement (lab/thread_sweep.rb measures): the knee of a sweep
    # over thread counts and whether the advisor's count is inside it.
    #
    # Each swept count T has requests/s and p99 latency from several rounds; its numbers are the
    # medians. The best throughput is the highest median requests/s, the best p99 the lowest
    # median p99. T qualifies when its requests/s >= THROUGHPUT x the best and its p99 <=
    # LATENCY x the best p99. The knee is the smallest qualifying T. The advisor's count R (always
    # swept too) is inside when it qualifies and is no more than one swept count above the knee
    # (the next of the sweep's own counts: counts closer than that are within the runs' spread).
    module Sweep
      THROUGHPUT = 0.95
      LATENCY = 1.10

      Point = Struct.new(:threads, :rps, :p99_ms, :rps_range, :p99_range, :qualifies, keyword_init: true)
      Judgement = Struct.new(:points, :best_rps, :best_p99_ms, :knee, :upper, :recommended, :verdict, :reason,
                             keyword_init: true) do
        def point(threads) = points.find { |point| point.threads == threads }
        def inside? = verdict == :inside
      end

      module_function

      # +runs+: { threads => { rps: [..], p99_ms: [..] } }; +counts+: the sweep's own counts;
      # +recommended+: the advisor's count (one of the runs).
      def judge(runs, counts:, recommended:)
        raw = runs.map { |threads, numbers| [Integer(threads.to_s), numbers.transform_keys(&:to_sym)] }.sort_by(&:first)
        best_rps = raw.map { |_t, numbers| Units.median(numbers[:rps]) }.max
        best_p99 = raw.map { |_t, numbers| Units.median(numbers[:p99_ms]) }.min
        points = raw.map do |threads, numbers|
          rps = Units.median(numbers[:rps])
          p99 = Units.median(numbers[:p99_ms])
          Point.new(threads: threads, rps: rps, p99_ms: p99, rps_range: numbers[:rps].minmax, p99_range: numbers[:p99_ms].minmax,
                    qualifies: rps >= THROUGHPUT * best_rps && p99 <= LATENCY * best_p99)
        end
        knee = points.find(&:qualifies)&.threads
        upper = knee && (counts.sort.find { |count| count > knee } || knee)
        verdict, reason = verdict(points, knee, upper, recommended, best_rps, best_p99)
        Judgement.new(points: points, best_rps: best_rps, best_p99_ms: best_p99, knee: knee, upper: upper,
                      recommended: recommended, verdict: verdict, reason: reason)
      end

      def verdict(points, knee, upper, recommended, best_rps, best_p99)
        chosen = points.find { |point| point.threads == recommended } or
          return [:not_measured, "the recommended count #{recommended} was not swept"]
        return [:no_knee, "no swept count has both #{percent(THROUGHPUT)} of the best throughput and a p99 within " \
                          "#{percent(LATENCY - 1)} of the best"] unless knee

        numbers = format("%d threads: %.0f requests/s (%s of the best), p99 %.0f ms (%s of the best)", recommended, chosen.rps,
                         percent(chosen.rps.fdiv(best_rps)), chosen.p99_ms, percent(chosen.p99_ms.fdiv(best_p99)))
        if recommended < knee
          [:too_few, "#{numbers}: below the knee"]
        elsif recommended > upper
          [:too_many, "#{numbers}: more threads than the knee's #{knee}#{" (or #{upper})" if upper != knee} needs"]
        elsif !chosen.qualifies
          [:outside, "#{numbers}: inside the knee's range but short of its criteria"]
        else
          [:inside, numbers]
        end
      end

      def percent(ratio) = format("%.0f %%", 100 * ratio)

      # The sweep as Markdown table rows: one per count, the knee and the advisor's count marked.
      def table(judgement)
        rows = ["| threads | requests/s (median; min-max) | p99 ms (median; min-max) | meets both | |", "|---|---|---|---|---|"]
        judgement.points.each do |point|
          marks = []
          marks << "knee" if point.threads == judgement.knee
          marks << "advisor" if point.threads == judgement.recommended
          rows << format("| %d | %.0f (%.0f-%.0f) | %.0f (%.0f-%.0f) | %s | %s |", point.threads, point.rps, *point.rps_range,
                         point.p99_ms, *point.p99_range, point.qualifies ? "yes" : "no", marks.join(", "))
        end
        rows
      end
    end
  end
end
