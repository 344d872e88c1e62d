# frozen_string_literal: true

require_relative "../rule"

module GVLScope
  module Analysis
    module Rules
      # GC: a collection holds the GVL (a :gc interval), so no other thread of the process runs
      # Ruby while it lasts. Found when collections took a tenth of the wall time or more (where
      # tuning GC pays) and other threads' waits for the GVL during them (Blame#during_gc) are a
      # tenth of all GVL wait and a quarter timeslice or more (other threads paid for it, not just
      # the allocating one).
      class GarbageCollection < Rule
        kind :gc, title: "GC stall",
                  legend: "garbage collection holds the GVL while other threads wait"

        WALL_SHARE = 0.1
        WAIT_SHARE = 0.1

        def findings
          [collections].compact
        end

        private

        def collections
          gc_ns = @rows.each_value.sum(&:gc_ns)
          # A damaged trace can be 0 s long with no collection: nothing to tell then.
          return if gc_ns <= 0 || gc_ns < WALL_SHARE * @report.duration_ns

          during = @report.blame.during_gc.select { |_, ns| ns.positive? }.sort_by { |_, ns| -ns }
          waited = during.sum { |_, ns| ns }
          return if waited <= 0 || waited < WAIT_SHARE * @all_wait_ns || waited < @timeslice_ns / 4

          collectors = @rows.each_value.select { |row| row.gc_ns.positive? }.sort_by { |row| -row.gc_ns }
          top = collectors.first
          finding(
            kind: :gc, about: collectors, others: during.map { |serial, _| @labels[serial] }, explains_wait_ns: waited,
            title: format("GC: garbage collection held the GVL %d%% of the time (%s), stopping every other thread; " \
                          "%s ran %d%% of it. Threads waited %s for the GVL during collections (%s)",
                          percent(gc_ns), ms(gc_ns), quote(top.label), (100.0 * top.gc_ns / gc_ns).round, ms(waited),
                          during.first(3).map { |serial, ns| "#{quote(@labels[serial])} #{ms(ns)}" }.join(", ")),
            evidence: { gc_ns: gc_ns, gc_share: (gc_ns.to_f / @report.duration_ns).round(4),
                        collectors: collectors.to_h { |row| [row.label, row.gc_ns] },
                        waited_during_gc: during.to_h { |serial, ns| [@labels[serial], ns] } },
            fix: "a collection stops every thread of the process: allocate less in #{quote(top.label)} (reuse " \
                 "buffers and strings, avoid temporary objects in loops), let the heap grow so GC runs less often " \
                 "(RUBY_GC_HEAP_GROWTH_FACTOR, RUBY_GC_MALLOC_LIMIT), or move that work to another process",
            focus_ns: top.longest_gc
          )
        end
      end
    end
  end
end
