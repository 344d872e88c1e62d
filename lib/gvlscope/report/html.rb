# frozen_string_literal: true

require "json"
require_relative "../metrics_text"

module GVLScope
  class Report
    # A Report as one self-contained HTML file (no network): findings, per-thread table,
    # histograms and a zoomable timeline drawn on a canvas by report/viewer.js. The intervals are
    # embedded as packed binary (base64), 9 bytes each, so a trace of millions of events stays a
    # file a browser opens; the viewer merges intervals narrower than a pixel when zoomed out.
    class HTML
      TEMPLATE = File.join(__dir__, "template.html")
      VIEWER = File.join(__dir__, "viewer.js")
      # One byte per interval: the colour the viewer gives it (the legend lists them in this order).
      STATE_CODES = { started: 0, wants_gvl: 1, running: 2, gc: 3, io_sleep: 4, lock: 5, unknown: 6, died: 7 }.freeze
      WAITING_CODES = { io_sleep: 4, lock: 5, unknown: 6, nil => 6 }.freeze

      def initialize(report)
        @report = report
      end

      def write(io)
        template = File.read(TEMPLATE)
        data = JSON.generate(model).gsub("</", "<\\/") # "</script>" in a thread name must not end the script
        page = template.sub("/*GVLSCOPE_VIEWER*/") { File.read(VIEWER) }
                       .sub("/*GVLSCOPE_DATA*/") { "const REPORT = #{data};" }
                       .sub("<!--GVLSCOPE_TITLE-->") { escape(File.basename(@report.file.path.to_s)) }
        io.write(page)
      end

      private

      def model
        report = @report
        unit_ns = [(report.duration_ns / 0xFFFF_FFFF.to_f).ceil, 1].max
        {
          file: report.file.path.to_s,
          durationNs: report.duration_ns,
          unitNs: unit_ns,
          states: STATE_CODES.keys.map(&:to_s),
          summary: Text.new(report).to_s.lines.first(2).join,
          findings: report.findings.map(&:to_h),
          table: Summary.table(report.rows),
          histograms: histograms,
          threads: report.selected_threads.map { |thread| lane(thread, unit_ns) },
        }
      end

      def histograms
        h = @report.histograms
        [
          MetricsText.histogram("GVL hold time (us)", h[:hold_ns], scale: 1000),
          MetricsText.histogram("wait for the GVL (us)", h[:wait_ns], scale: 1000),
          MetricsText.histogram("threads still waiting at acquire", h[:waiters_at_acquire]),
        ]
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
          codes[index] = state == :waiting ? WAITING_CODES.fetch(interval.detail) : STATE_CODES.fetch(state)
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
