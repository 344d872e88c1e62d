# frozen_string_literal: true

require_relative "../metrics_text"

module GVLScope
  class Report
    # A Report as text: what `gvlscope report` prints, and the short form `gvlscope run` prints
    # at exit.
    class Text
      def initialize(report)
        @report = report
      end

      def to_s
        lines = header + [""] + findings + [""] + Summary.table(@report.rows) + [""]
        histograms = @report.histograms
        lines.concat(MetricsText.histogram("GVL hold time (us)", histograms[:hold_ns], scale: 1000))
        lines << ""
        lines.concat(MetricsText.histogram("wait for the GVL (us)", histograms[:wait_ns], scale: 1000))
        lines << ""
        lines.concat(MetricsText.histogram("threads still waiting at acquire", histograms[:waiters_at_acquire]))
        lines.join("\n")
      end

      # Header, findings' titles and the five threads that waited most.
      def short
        rows = @report.rows.sort_by { |row| -row.wants_gvl_ns }
        table = Summary.table(rows.first(5))
        table << "  (#{rows.size - 5} more threads)" if rows.size > 5
        (header + [""] + findings(fixes: false) + [""] + table).join("\n")
      end

      private

      def header
        report = @report
        file = report.file
        notes = []
        notes << "#{file.dropped} events dropped" if file.dropped.positive?
        notes << "truncated" if file.truncated?
        held = report.held_ratio_by_ractor
        per_ractor = held.size > 1 ? " (#{held.map { |id, r| format('Ractor %d: %.1f%%', id, 100 * r) }.join(', ')})" : ""
        [
          format("%s: %.3f s, %d events, %d threads, timeslice %d ms%s", file.path, report.duration_ns / 1e9,
                 file.size, report.summary.rows.size, report.timeslice_ns / 1_000_000,
                 notes.empty? ? "" : " (#{notes.join(', ')})"),
          format("GVL held %.1f%% of the time%s; threads waited %s for it in all",
                 100 * held.values.max.to_f, per_ractor, Summary.ms(report.wait_ns)),
        ]
      end

      def findings(fixes: true)
        list = @report.findings
        return ["No findings: no convoy, hog or contention in this trace."] if list.empty?

        lines = ["Findings (#{list.size}):"]
        list.each_with_index do |finding, index|
          lines << "#{index + 1}. #{finding.title}"
          lines << "   fix: #{finding.fix}" if fixes
        end
        lines
      end
    end
  end
end
