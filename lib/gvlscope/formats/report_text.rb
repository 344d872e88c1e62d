# frozen_string_literal: true

require_relative "format"
require_relative "histogram_text"
require_relative "thread_table"
require_relative "../units"

module GVLScope
  module Formats
    # An Analysis::Report as text: what `gvlscope report` prints, and the short form `gvlscope run`
    # prints at exit.
    class ReportText < Format
      def write(io)
        report = @subject
        lines = header + [""] + findings + [""] + ThreadTable.lines(report.rows)
        histograms = report.histograms
        HistogramText.report_sections(histograms[:hold_ns], histograms[:wait_ns],
                                      histograms[:waiters_at_acquire]).each do |histogram|
          lines << ""
          lines.concat(histogram)
        end
        io << lines.join("\n")
      end

      # Header, findings' titles and the five threads that waited most.
      def short
        rows = @subject.rows.sort_by { |row| -row.wait_ns }
        table = ThreadTable.lines(rows.first(5))
        table << "  (#{rows.size - 5} more threads)" if rows.size > 5
        (header + [""] + findings(fixes: false) + [""] + table).join("\n")
      end

      # The first two lines: the trace, and how much the GVL was held and waited for.
      def header
        report = @subject
        file = report.file
        notes = []
        notes << "#{file.dropped} events dropped" if file.dropped.positive?
        notes << "truncated" if file.truncated?
        held = report.held_ratio_by_ractor
        per_ractor = held.size > 1 ? " (#{held.map { |id, r| format('Ractor %d: %.1f%%', id, 100 * r) }.join(', ')})" : ""
        [
          format("%s: %.3f s, %d events, %d threads, timeslice %d ms%s", file.path, report.duration_ns / 1e9,
                 file.size, report.all_rows.size, report.timeslice_ns / 1_000_000,
                 notes.empty? ? "" : " (#{notes.join(', ')})"),
          format("GVL held %.1f%% of the time%s; threads waited %s for it in all",
                 100 * held.values.max.to_f, per_ractor, Units.ms(report.wait_ns)),
        ]
      end

      private

      def findings(fixes: true)
        list = @subject.findings
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
