# frozen_string_literal: true

require "json"
require_relative "format"
require_relative "histogram_text"
require_relative "report_text"
require_relative "thread_table"
require_relative "../units"
require_relative "../vocabulary"
require_relative "../analysis/stack_profile"

module GVLScope
  module Formats
    # An Analysis::Report as one self-contained HTML file (no network): findings, per-thread table,
    # histograms and a zoomable timeline drawn on a canvas by report_html/viewer.js. The intervals are
    # embedded as packed binary (base64), 9 bytes each, so a trace of millions of events stays a
    # file a browser opens; the viewer merges intervals narrower than a pixel when zoomed out.
    #
    # With stacks, "Where the waiting came from": an icicle graph of the wait-weighted holder
    # profile (all threads, and one per thread a finding names as the holder: clicking the
    # finding shows it) and the release-site table. The profiles are call trees aggregated here
    # and capped in nodes, so a long trace embeds kilobytes, not its samples.
    class ReportHTML < Format
      TEMPLATE = File.join(__dir__, "report_html", "template.html")
      VIEWER = File.join(__dir__, "report_html", "viewer.js")
      # One byte per interval: the colour the viewer gives it (the legend lists them in this order):
      # the states, with an idle thread's reason in place of :idle.
      CODES = (Vocabulary::STATES.keys - [:idle] + Vocabulary::IDLE_REASONS.keys).each_with_index.to_h.freeze
      IDLE_CODES = Vocabulary::IDLE_REASONS.keys.to_h { |reason| [reason, CODES.fetch(reason)] }
                                                 .merge(nil => CODES.fetch(:unknown)).freeze
      # Nodes of the whole profile's tree, and of each holder thread's: the icicle draws in
      # milliseconds and the page stays small whatever the trace's length.
      PROFILE_NODES = 2000
      THREAD_PROFILE_NODES = 500
      RELEASE_SITES = 10 # rows of the release-site table

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
          findings: report.findings.map { |finding| finding.to_h.merge(holder: holder_of(finding)) },
          table: ThreadTable.lines(report.rows),
          histograms: histograms,
          threads: report.selected_threads.map { |thread| lane(thread, unit_ns) },
          stacks: stacks,
        }
      end

      # The thread whose code a finding is about when it held the GVL: a hog itself, a convoy's
      # main holder; nil for contention (everyone's), which then shows all threads' profile.
      def holder_of(finding)
        case finding.kind
        when :hog then finding.thread
        when :convoy then finding.evidence[:holders]&.keys&.find { |holder| holder.is_a?(String) }
        end
      end

      # nil without stacks (the page says "stacks: not recorded"); else the profiles and the sites.
      def stacks
        timeline = @subject.timeline
        return nil unless timeline.stacks?

        frames = {}
        holders = @subject.findings.filter_map { |finding| holder_of(finding) }.uniq
        samples_of = timeline.samples.group_by { |sample| timeline.threads[sample.thread]&.label }
        {
          samples: timeline.samples.size,
          all: tree(timeline.samples, PROFILE_NODES, frames),
          threads: holders.to_h { |label| [label, tree(samples_of.fetch(label, []), THREAD_PROFILE_NODES, frames)] },
          frames: frames.keys.map { |frame| [frame.label, frame.path, frame.line] },
          sites: release_sites,
        }
      end

      # A call tree as flat arrays in drawing order (each node after its parent, children heaviest
      # first): parent index (-1 at the root), frame index in +frames+ (-1 at the root), weight.
      def tree(samples, max_nodes, frames)
        parents = []
        frame_ids = []
        weights = []
        visit = lambda do |node, parent|
          index = parents.size
          parents << parent
          frame_ids << (node.frame ? frames[node.frame] ||= frames.size : -1)
          weights << node.weight
          node.children.each { |child| visit.call(child, index) }
        end
        visit.call(Analysis::StackProfile.new(samples).tree(max_nodes: max_nodes), -1)
        { samples: samples.size, parent: parents, frame: frame_ids, weight: weights }
      end

      def release_sites
        @subject.code_locations.release_sites.first(RELEASE_SITES).map do |row|
          { site: row.name.delete("`"), cause: row.cause.to_s, wait: Units.ms(row.weight), share: row.share.round(4),
            calls: row.count }
        end
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
          label: thread.display_name, serial: thread.serial, ractor: thread.ractor_id, count: intervals.size,
          codes: [codes.pack("C*")].pack("m0"), starts: [starts.pack("L<*")].pack("m0"), ends: [ends.pack("L<*")].pack("m0")
        }
      end

      def escape(text) = text.gsub("&", "&amp;").gsub("<", "&lt;").gsub(">", "&gt;")
    end
  end
end
