# frozen_string_literal: true

require_relative "format"
require_relative "../lab"

module GVLScope
  module Formats
    # A lab result (Lab::Runner::Result) as text: what `gvlscope lab run` prints.
    class LabText < Format
      def write(io)
        result = @subject
        lines = ["", "#{result.scenario.name}: #{result.scenario.summary}",
                 "  #{result.ruby_description}; #{Lab.machine}; #{Lab.describe_knobs(result.knobs)}; #{format('%.1f', result.seconds)} s"]
        result.verdicts.each do |verdict|
          lines << "  [#{verdict.label}] #{verdict.claim.text}"
          lines << "      published: #{verdict.claim.published}"
          lines << "      measured:  #{verdict.measured || verdict.error}"
          if verdict.status == :differs
            lines << "      tolerance: #{verdict.claim.tolerance}"
            lines << "      likely why: #{verdict.claim.differs_because}"
          end
        end
        Lab.details(result)&.each { |line| lines << "  #{line}" }
        lines << "  findings: #{result.findings.empty? ? 'none' : ''}"
        result.findings.each { |finding| lines << "    - #{finding.title}" }
        lines << (result.trace ? "  trace: #{result.trace} (gvlscope report #{result.trace})" :
                                 "  trace: none was written (see the scenario's output above): claims from the trace are not measured")
        io << lines.join("\n")
      end
    end
  end
end
