# frozen_string_literal: true

# Loaded with -r by bench/report.rb when FINDINGS=N: N made-up findings added to every report,
# spread over the trace, each focused on FOCUS_MS (20 ms), as bench/report_html_passes.rb adds
# them, so that the HTML report of a synthetic trace (which has none) fetches its windows.
require "gvlscope/analysis"

count = Integer(ENV.fetch("FINDINGS"))
focus_ns = (Float(ENV.fetch("FOCUS_MS", "20")) * 1e6).to_i
GVLScope::Analysis::Report.prepend(Module.new do
  define_method(:findings) do
    @made_up ||= super() + (1..count).map do |index|
      at = duration_ns / (count + 1) * index
      GVLScope::Analysis::Finding.new(kind: :convoy, about: ["worker 1"], threads: ["worker 1"], title: "made up #{index}",
                                      evidence: {}, fix: "-", focus_ns: [at, at + focus_ns], explains_wait_ns: 0, wait_share: 0.0)
    end
  end
end)
