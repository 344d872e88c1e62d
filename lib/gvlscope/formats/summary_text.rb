# frozen_string_literal: true

require_relative "format"
require_relative "thread_table"
require_relative "report_text"
require_relative "../analysis/thread_stats"

module GVLScope
  module Formats
    # `gvlscope summary`: the trace's size, GVL held % and the per-thread table.
    class SummaryText < Format
      def write(io)
        stats = Analysis::ThreadStats.new(@subject)
        file = @subject.file
        duration = @subject.duration_ns
        lines = []
        lines << format("%s: %.3f s, %d events, %d threads%s", file.path, duration / 1e9, file.size, stats.rows.size,
                        file.dropped.positive? ? ", #{file.dropped} events dropped" : "")
        held, per_ractor = ReportText.held_facts(stats.held_ratio_by_ractor(duration))
        lines << format("GVL held %.1f%% of the time%s", 100 * held, per_ractor)
        lines << ""
        lines.concat(ThreadTable.lines(stats.rows), ThreadTable.legend(stats.rows))
        io << lines.join("\n") << "\n"
      end
    end
  end
end
