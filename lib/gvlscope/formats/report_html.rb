# frozen_string_literal: true

require "json"
require_relative "format"
require_relative "histogram_text"
require_relative "report_text"
require_relative "thread_table"
require_relative "../vocabulary"

module GVLScope
  module Formats
    # An Analysis::Report as one self-contained HTML file (no network): findings, per-thread table,
    # histograms and a zoomable timeline drawn on a canvas by report_html/viewer.js. The intervals are
    # embedded as packed binary (base64), 9 bytes each, so a trace of millions of events stays a
    # file a browser opens; the viewer merges intervals narrower than a pixel when zoomed out.
    class ReportHTML < Format
      TEMPLATE = File.join(__dir__, "report_html", "template.html")
      VIEWER = File.join(__dir__, "report_html", "viewer.js")
      # One byte per interval: the colour the viewer gives it (the legend lists them in this order):
      # the states, with an idle thread's reason in place of :idle.
      CODES = (Vocabulary::STATES.keys - [:idle] + Vocabulary::IDLE_REASONS.keys).each_with_index.to_h.freeze
      IDLE_CODES = Vocabulary::IDLE_REASONS.keys.to_h { |reason| [reason, CODES.fetch(reason)] }
                                                 .merge(nil => CODES.fetch(:unknown)).freeze

      def write(io)
        template = File.read(TEMPLATE)
        data = JSON.generate(model).gsub("</", "<\\/") # "</script>" in a thread name must not end the script
        page = template.sub("/*GVLSCOPE_VIEWER*/") { File.read(VIEWER) }
                       .sub("/*GVLSCOPE_DATA*/") { "const REPORT = #{data};" }
                       .sub("<!--GVLSCOPE_TITLE-->") { escape(File.basename(@subject.file.path.to_s)) }
        io << page
      end

      private

      def model
        report = @subject
        unit_ns = [(report.duration_ns / 0xFFFF_FFFF.to_f).ceil, 1].max
        {
          file: report.file.path.to_s,
          durationNs: report.duration_ns,
          unitNs: unit_ns,
          states: CODES.keys.map(&:to_s),
          labels: CODES.keys.map { |code| label(code) },
          summary: "#{ReportText.new(report).header.join("\n")}\n",
          findings: report.findings.map(&:to_h),
          table: ThreadTable.lines(report.rows),
          histograms: histograms,
          threads: report.selected_threads.map { |thread| lane(thread, unit_ns) },
        }
      end

      # What the legend and the hover box say for a code: the state, or "idle (IO / sleep)".
      def label(code)
        reason = Vocabulary::IDLE_REASONS[code]
        reason ? "idle (#{reason})" : code.to_s
      end

      def histograms
        h = @subject.histograms
        HistogramText.report_sections(h[:hold_ns], h[:wait_ns], h[:waiters_at_acquire])
      end

      # A thread's intervals as three little-endian arrays: state codes (uint8), starts and ends
      # (uint32, in unitNs since the trace started).
      def lane(thread, unit_ns)
        intervals = thread.intervals
        codes = Array.new(intervals.size)
        starts = Array.new(intervals.size)
        ends = Array.new(intervals.size)
        # One pass, integer division only: a trace holds millions of intervals.
        intervals.each_with_index do |interval, index|
          state = interval.state
          codes[index] = state == :idle ? IDLE_CODES.fetch(interval.reason) : CODES.fetch(state)
          starts[index] = interval.start_ns / unit_ns
          ends[index] = interval.end_ns / unit_ns
        end
        {
          label: thread.label, serial: thread.serial, ractor: thread.ractor_id, count: intervals.size,
          codes: [codes.pack("C*")].pack("m0"), starts: [starts.pack("L<*")].pack("m0"), ends: [ends.pack("L<*")].pack("m0")
        }
      end

      def escape(text) = text.gsub("&", "&amp;").gsub("<", "&lt;").gsub(">", "&gt;")
    end
  end
end
