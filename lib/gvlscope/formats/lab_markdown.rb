# frozen_string_literal: true

require_relative "format"
require_relative "../lab"

module GVLScope
  module Formats
    # Lab results as Markdown: what `gvlscope lab all` writes to docs/lab.md. +command+ is the
    # command line that produced them, named on the page.
    class LabMarkdown < Format
      def initialize(results, command:)
        super(results)
        @command = command
      end

      def write(io)
        results = @subject
        lines = ["# The lab: published GVL experiments, measured here", "",
                 "Written by `#{@command}` on #{Time.now.utc.strftime('%Y-%m-%d')}: #{Lab.machine}. " \
                 "Each claim is judged by a predicate over the numbers measured in that run (tolerances in " \
                 "`lib/gvlscope/lab/scenarios.rb`); a claim that DIFFERS is a result, not a failure. " \
                 "The programs are in `lab/`; run one with `gvlscope lab run NAME`.", ""]
        results.each do |result|
          lines << "## #{result.scenario.name}"
          lines << ""
          lines << "#{result.scenario.summary}. Source: #{result.scenario.source}."
          lines << ""
          lines << "#{result.ruby_description}; #{Lab.describe_knobs(result.knobs)}; #{format('%.1f', result.seconds)} s. " \
                   "Trace: `#{File.basename(result.trace.to_s)}` (`gvlscope report` it for the timeline)."
          lines << ""
          lines << "| claim | published | measured | tolerance | verdict |"
          lines << "|---|---|---|---|---|"
          result.verdicts.each do |verdict|
            label = verdict.status == :differs ? "**DIFFERS** (likely: #{verdict.claim.differs_because})" : verdict.label
            cells = [verdict.claim.text, verdict.claim.published, verdict.measured || verdict.error, verdict.claim.tolerance, label]
            lines << "| #{cells.map { |cell| cell.to_s.gsub('|', '\\|') }.join(' | ')} |"
          end
          lines << ""
          if (details = Lab.details(result))
            lines.concat(details)
            lines << ""
          end
          unless result.findings.empty?
            lines << "gvlscope report's findings:"
            result.findings.each { |finding| lines << "- #{finding.title}" }
            lines << ""
          end
        end
        io << lines.join("\n") << "\n"
      end
    end
  end
end
