# frozen_string_literal: true

require_relative "../support/units"

module GVLScope
  module Formats
    # A log2 histogram as DTrace quantize-style rows: the bucket, a bar, count. A time histogram
    # (+time+: counts of nanoseconds) names each row by its range with units ("32.8-65.5 us", "524
    # us-1.05 ms"); a count histogram by its lower bound. Part of the metrics text, the report text
    # and the HTML report.
    module HistogramText
      module_function

      def lines(title, counts, time: false, width: 40)
        column = time ? 16 : 12
        lines = [title, format("%#{column}s  %-#{width}s %s", time ? "range" : "value", "------------- Distribution -------------",
                               "count")]
        used = counts.each_index.select { |b| counts[b].positive? }
        return lines << "  (none)" if used.empty?

        total = counts.sum
        (used.min..[used.max + 1, counts.size - 1].min).each do |bucket|
          bar = "@" * (width * counts[bucket] / total.to_f).round
          name = time ? range(bucket) : Log2.lower(bucket).to_s
          lines << format("%#{column}s |%-#{width}s %d", name, bar, counts[bucket])
        end
        lines
      end

      # The three histograms every report shows, as lists of lines.
      def report_sections(hold_ns, wait_ns, waiters_at_acquire)
        [lines("GVL hold time", hold_ns, time: true), lines("wait for the GVL", wait_ns, time: true),
         lines("threads still waiting at acquire", waiters_at_acquire)]
      end

      # A time bucket's range: "0 ns", "2-3 ns", "32.8-65.5 us", "524 us-1.05 ms".
      def range(bucket)
        low, high = Log2.lower(bucket), Log2.upper(bucket) + 1
        return "0 ns" if high <= 1

        low_value, low_unit = with_unit(low)
        high_value, high_unit = with_unit(high)
        low_unit == high_unit ? "#{low_value}-#{high_value} #{high_unit}" : "#{low_value} #{low_unit}-#{high_value} #{high_unit}"
      end

      # [three significant digits, unit] of +ns+.
      def with_unit(ns)
        value, unit = [[1e9, "s"], [1e6, "ms"], [1e3, "us"]].find { |size, _| ns >= size } || [1, "ns"]
        [format("%.3g", ns / value.to_f), unit]
      end
    end
  end
end
