# frozen_string_literal: true

require "etc"

module GVLScope
  module Lab
    # Lab results as text (the terminal) and as Markdown (docs/lab.md).
    module Render
      module_function

      def machine = "#{Etc.nprocessors} cores, #{RUBY_PLATFORM}"

      def knobs(result)
        k = result.knobs
        list = ["size #{k.size}"]
        list << "M:N threads" if k.mn
        list << "timeslice #{k.timeslice_ms} ms" if k.timeslice_ms
        list << "priority #{k.priority}" if k.priority.to_i != 0
        list.join(", ")
      end

      def text(result)
        lines = ["", "#{result.scenario.name}: #{result.scenario.summary}",
                 "  #{result.ruby_description}; #{machine}; #{knobs(result)}; #{format('%.1f', result.seconds)} s"]
        result.verdicts.each do |verdict|
          lines << "  [#{verdict.label}] #{verdict.claim.text}"
          lines << "      published: #{verdict.claim.published}"
          lines << "      measured:  #{verdict.measured || verdict.error}"
          if verdict.status == :differs
            lines << "      tolerance: #{verdict.claim.tolerance}"
            lines << "      likely why: #{verdict.claim.differs_because}"
          end
        end
        lines << "  findings: #{result.findings.empty? ? 'none' : ''}"
        result.findings.each { |finding| lines << "    - #{finding.title}" }
        lines << (result.trace ? "  trace: #{result.trace} (gvlscope report #{result.trace})" :
                                 "  trace: none was written (see the scenario's output above): claims from the trace are not measured")
        lines.join("\n")
      end

      def markdown(results, command:)
        lines = ["# The lab: published GVL experiments, measured here", "",
                 "Written by `#{command}` on #{Time.now.utc.strftime('%Y-%m-%d')}: #{machine}. " \
                 "Each claim is judged by a predicate over the numbers measured in that run (tolerances in " \
                 "`lib/gvlscope/lab/scenarios.rb`); a claim that DIFFERS is a result, not a failure. " \
                 "The programs are in `lab/`; run one with `gvlscope lab run NAME`.", ""]
        results.each do |result|
          lines << "## #{result.scenario.name}"
          lines << ""
          lines << "#{result.scenario.summary}. Source: #{result.scenario.source}."
          lines << ""
          lines << "#{result.ruby_description}; #{knobs(result)}; #{format('%.1f', result.seconds)} s. " \
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
          unless result.findings.empty?
            lines << "gvlscope report's findings:"
            result.findings.each { |finding| lines << "- #{finding.title}" }
            lines << ""
          end
        end
        lines.join("\n")
      end
    end
  end
end
