# frozen_string_literal: true

require_relative "format"
require_relative "histogram_text"
require_relative "report_text"
require_relative "../support/units"

module GVLScope
  module Formats
    # A Metrics::Snapshot as text: totals, a per-thread table and DTrace-style histograms.
    class MetricsText < Format
      def write(io)
        s = @subject
        lines = []
        # (a share of one GVL, the busiest Ractor's, as the report says it)
        by_ractor = s.held_ratio_by_ractor
        held, per_ractor = by_ractor.empty? ? [s.held_ratio, ""] : ReportText.held_facts(by_ractor)
        lines << format("GVL held %.1f%% of %.3f s wall%s; %d acquisitions; total wait %s; %d threads waiting now",
                        100 * held, s.wall_ns / 1e9, per_ractor, s.acquisitions, ms(s.wait_ns), s.waiting_threads)
        lines << format("releases: %d blocking (or Thread.pass), %d preempted at the end of a timeslice, %d exit",
                        s.released_blocking, s.released_preempted, s.released_exit)
        lines << ""
        lines << format("%-24s %11s %11s %11s %9s %7s %13s", "thread", "run", "wait", "idle", "gc", "holds", "longest hold")
        s.all_rows.each do |row|
          next if row.equal?(s.exited) && row.holds.zero? && row.waits.zero?

          lines << format("%-24s %11s %11s %11s %9s %7d %13s", row.name.to_s[0, 24], ms(row.run_ns), ms(row.wait_ns),
                          ms(row.idle_ns), ms(row.gc_ns), row.holds, ms(row.longest_hold_ns))
        end
        HistogramText.report_sections(s.hold_histogram, s.wait_histogram, s.waiters_at_acquire_histogram).each do |histogram|
          lines << ""
          lines.concat(histogram)
        end
        io << lines.join("\n")
      end

      private

      def ms(ns) = Units.ms(ns)
    end
  end
end
