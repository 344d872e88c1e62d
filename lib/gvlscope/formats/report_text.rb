# frozen_string_literal: true

require_relative "format"
require_relative "histogram_text"
require_relative "thread_table"
require_relative "../support/units"

module GVLScope
  module Formats
    # An Analysis::Report as text: what `gvlscope report` prints, and the short form `gvlscope run`
    # prints at exit.
    class ReportText < Format
      def write(io)
        report = @subject
        lines = header + [""] + findings + [""] + ThreadTable.lines(report.rows) + ThreadTable.legend(report.rows) + [""] + code_locations
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
        (header + [""] + findings(fixes: false) + [""] + table + [""] + code_locations(rows: 3)).join("\n")
      end

      # "Where the waiting came from": the holders' code (samples weighted by waiters) and the
      # release sites (by the wait that followed each release).
      def code_locations(rows: 10)
        code = @subject.code_locations
        return ["Where the waiting came from: stacks: not recorded (--no-stacks, an older trace, or a gvl-tracing import)"] unless code.stacks?

        timeline = @subject.timeline
        counts = timeline.file.stack_counts || {}
        notes = []
        notes << "#{counts[:dropped]} stacks dropped (tables full)" if counts[:dropped].to_i.positive?
        notes << "#{counts[:unreadable]} releases whose frames could not be read" if counts[:unreadable].to_i.positive?
        notes << "holder samples: main Ractor only" if timeline.ractors.size > 1
        lines = ["Where the waiting came from#{notes.empty? ? '' : " (#{notes.join('; ')})"}:"]
        holders = code.holder_profile
        lines << "  holders: the code that held the GVL while threads waited (#{timeline.samples.size} samples, weighted by waiters)"
        lines << "    (no sample: no thread waited for a timer tick, 10 ms)" if holders.empty?
        holders.first(rows).each { |row| lines << format("    %5.1f%%  %s", 100 * row.share, row.name) }
        sites = code.release_sites
        lines << "  release sites: the calls that gave the GVL up, by the wait for it that followed " \
                 "(#{sites.sum(&:count)} releases recorded while another thread waited or in an event loop's turn)"
        lines << "    (none recorded)" if sites.empty?
        sites.first(rows).each do |row|
          lines << format("    %10s %5d calls  %-9s %s  (%s)", Units.ms(row.weight), row.count, row.cause, row.name,
                          row.threads.first(3).join(", "))
        end
        lines
      end

      # The first two lines: the trace, and how much the GVL was held and waited for.
      def header
        report = @subject
        file = report.file
        notes, held, per_ractor = ReportText.header_facts(report)
        [
          format("%s: %.3f s, %d events, %d threads, timeslice %d ms%s", file.path, report.duration_ns / 1e9,
                 file.size, report.all_rows.size, report.timeslice_ns / 1_000_000, notes),
          format("GVL held %.1f%% of the time%s; threads waited %s for it in all",
                 100 * held, per_ractor, Units.ms(report.wait_ns)),
          ReportText.overload_note(file),
        ].compact
      end

      # Holds are wall time: on a machine with more runnable threads than CPUs they include the time
      # the OS kept the holder off a CPU. nil unless the trace says its machine was overloaded.
      def self.overload_note(file)
        machine = file.machine
        return unless machine&.overloaded?

        format("The machine was overloaded (load %.1f on %d CPUs): holds include time the OS kept the holder " \
               "off a CPU", machine.load, machine.cpus)
      end

      # What every report's header says beside the numbers (the Markdown report too): the trace's
      # notes (" (12 events dropped, truncated)" or ""), the busiest Ractor's held share, and each
      # Ractor's share (" (Ractor 1: 40.0%, ...)") where there are several.
      def self.header_facts(report)
        file = report.file
        notes = []
        notes << "#{file.dropped} events dropped" if file.dropped.positive?
        notes << "truncated" if file.truncated?
        [notes.empty? ? "" : " (#{notes.join(', ')})", *held_facts(report.held_ratio_by_ractor)]
      end

      # The sentence of a report without findings: it names every kind the rules look for.
      def self.no_findings
        titles = Analysis::KINDS.each_value.map(&:title)
        "No findings: no #{titles[..-2].join(', ')} or #{titles.last} in this trace."
      end

      # [the busiest Ractor's held share, " (Ractor 1: 40.0%, ...)" or ""] of { ractor => share }:
      # a share per GVL (all Ractors' together could pass 100%). The summary says the same.
      def self.held_facts(held)
        per_ractor = held.size > 1 ? " (#{held.map { |id, r| format('Ractor %d: %.1f%%', id, 100 * r) }.join(', ')})" : ""
        [held.values.max.to_f, per_ractor]
      end

      private

      SHOWN_FINDINGS = 5 # the causes worth reading first; --json lists them all

      # Each finding with the wait it explains, most first (Report#findings), the first five.
      def findings(fixes: true)
        list = @subject.findings
        return [ReportText.no_findings] if list.empty?

        lines = ["Findings (#{list.size}), by #{Analysis::Finding.ranked_by(list)} each explains:"]
        list.first(SHOWN_FINDINGS).each_with_index do |finding, index|
          lines << format("%d. [%s] %s", index + 1, finding.explains, finding.title)
          lines << "   fix: #{finding.fix}" if fixes
        end
        hidden = list.size - SHOWN_FINDINGS
        lines << "(#{hidden} more finding#{'s' if hidden > 1}: gvlscope report --json lists them all)" if hidden.positive?
        lines
      end
    end
  end
end
