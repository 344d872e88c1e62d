# frozen_string_literal: true

require_relative "../units"

module GVLScope
  module Formats
    # A log2 histogram as DTrace quantize-style rows: value (the bucket's lower bound), a bar, count.
    # Part of the metrics text, the report text and the HTML report.
    module HistogramText
      module_function

      def lines(title, counts, scale: 1, width: 40)
        lines = [title, format("%12s  %-#{width}s %s", "value", "------------- Distribution -------------", "count")]
        used = counts.each_index.select { |b| counts[b].positive? }
        return lines << "  (none)" if used.empty?

        total = counts.sum
        (used.min..[used.max + 1, counts.size - 1].min).each do |bucket|
          bar = "@" * (width * counts[bucket] / total.to_f).round
          lines << format("%12s |%-#{width}s %d", scaled(Log2.lower(bucket), scale), bar, counts[bucket])
        end
        lines
      end

      # The three histograms every report shows, as lists of lines.
      def report_sections(hold_ns, wait_ns, waiters_at_acquire)
        [lines("GVL hold time (us)", hold_ns, scale: 1000), lines("wait for the GVL (us)", wait_ns, scale: 1000),
         lines("threads still waiting at acquire", waiters_at_acquire)]
      end

      def scaled(value, scale)
        scale == 1 ? value.to_s : (value / scale.to_f).round(value < scale ? 3 : 0).to_s.sub(/\.0\z/, "")
      end
    end
  end
end
