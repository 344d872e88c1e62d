# frozen_string_literal: true

require "json"
require_relative "format"

module GVLScope
  module Formats
    # An Analysis::Advisor::Advice as JSON: `gvlscope advise --json`. Schema: docs/advise.md.
    class AdviceJSON < Format
      SCHEMA_VERSION = 1

      def write(io)
        io << JSON.pretty_generate(to_h) << "\n"
      end

      def to_h
        advice = @subject
        w = advice.workload
        {
          gvlscope_advice: SCHEMA_VERSION,
          recommendation: { threads: advice.threads, processes: advice.processes, cores: advice.cores,
                            current_threads: advice.current_threads, current_processes: advice.current_processes,
                            limited_by: advice.limited_by.to_s },
          hog: w.hog && { label: w.hog.label, held_ns: w.hog.held_ns, share: w.hog.share.round(6), code: w.hog.code,
                          in_pool: w.hog.in_pool, reason: advice.hog_reason },
          measured: {
            source: w.source, unit: w.unit.to_s, count: w.count, window_ns: w.window_ns,
            pool: { name: w.pool, threads: w.threads },
            shares: w.shares.transform_values { |share| share.round(6) },
            run_ns: w.run_ns, gc_ns: w.gc_ns, wait_ns: w.wait_ns, idle_ns: w.idle_ns,
            excluded_idle_ns: w.excluded_idle_ns, other_held_ns: w.other_held_ns, cpu_wait_ns: w.cpu_wait_ns,
            cpu_ns: w.cpu_ns, io_overlap_wait_ns: w.io_overlap_wait_ns,
            held_ratio: w.held_ratio&.round(6), notes: w.notes.to_a
          },
          model: {
            name: if advice.kinds
                    "closed queueing network of one GVL, #{advice.kinds.size} kinds of #{advice.unit_name} simulated (exponential times)"
                  else
                    "closed queueing network of one GVL, mean value analysis (exponential times)"
                  end,
            kinds: advice.kinds&.map do |kind|
              { label: kind.label, share: kind.share.round(6), demand_ns: kind.demand.round, idle_ns: kind.idle.round,
                io_overlap_wait_ns: kind.overlap.round, cpu_wait_ns: kind.cpu_wait.round }
            end,
            demand_ns: advice.per_request? ? advice.demand_ns.round : nil,
            idle_ns: advice.per_request? ? advice.idle_per_request_ns.round : nil,
            charge: w.charge.round(6), run_share: advice.run_share.round(6),
            no_collision_threads: advice.no_collision_threads.round(3), target: advice.target,
            max_wait_ns: advice.max_wait_ns&.round, sensitivity: advice.sensitivity,
            curve: advice.curve.map do |point|
              { threads: point.threads, gvl_busy: point.busy.round(6), wait_per_run: point.wait_per_demand.round(6),
                wait_ns: advice.wait_ns_at(point.threads)&.round }
            end
          },
          reasoning: advice.reasoning,
          processes_reasoning: advice.processes_reasoning,
          what_would_change: advice.what_would_change,
        }
      end
    end
  end
end
