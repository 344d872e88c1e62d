# frozen_string_literal: true

require_relative "errors"

module GVLScope
  # Numbers as people read them, and the log2 histogram buckets every histogram shares (the C
  # recorder's, ext/gvlscope/histogram.h, and the report's).
  module Units
    module_function

    # "12.3 ms": tables.
    def ms(ns) = format("%.1f ms", ns / 1e6)

    # "606 MB": a size to the nearest megabyte (1 MB = 2**20 bytes).
    def megabytes(bytes) = format("%.0f MB", bytes / 1_048_576.0)

    # "123 ms" from 10 ms up, else "1.2 ms": sentences, where the tenths of a long wait are noise.
    def ms_rounded(ns) = format(ns >= 10_000_000 ? "%.0f ms" : "%.1f ms", ns / 1e6)

    # Three significant digits, in us below 1 ms: log lines of quantiles.
    def ms_or_us(ns) = ns < 1_000_000 ? format("%.3g us", ns / 1e3) : format("%.3g ms", ns / 1e6)

    # Milliseconds (a user's option) as ns; nil stays nil. +owner+ names what is configured.
    def ms_option_to_ns(ms, name, owner)
      return nil if ms.nil?
      unless ms.is_a?(Numeric) && ms >= 0
        raise Error, "#{owner}: #{name} must be a number of milliseconds >= 0, got #{ms.inspect}"
      end

      (ms * 1_000_000).to_i
    end

    TIME_UNITS = { "ns" => 1, "us" => 1_000, "ms" => 1_000_000, "s" => 1_000_000_000 }.freeze
    TIME_RANGE = /\A(\d+(?:\.\d+)?)(ns|us|ms|s)?\.\.(\d+(?:\.\d+)?)(ns|us|ms|s)\z/

    # "12.5s..12.7s", "300ms..450ms" or "12.5..12.7s" (the end's unit for both) as [from_ns, to_ns]:
    # the start rounded down and the end up to a nanosecond (exact decimals: no float error). A
    # bad one raises Error naming +option+.
    def time_range_to_ns(text, option)
      match = TIME_RANGE.match(text.to_s)
      unless match
        raise Error, "#{option} #{text.to_s.inspect}: not a time range: give FROM..TO since the trace began, " \
                     "with a unit (ns, us, ms or s), e.g. 12.5s..12.7s or 300..450ms"
      end
      from = Rational(match[1]) * TIME_UNITS.fetch(match[2] || match[4])
      to = Rational(match[3]) * TIME_UNITS.fetch(match[4])
      raise Error, "#{option} #{text}: the range is empty or reversed (FROM must be before TO)" unless from < to

      [from.floor, to.ceil]
    end

    # "12.512345s": seconds to the microsecond (what --window reads back), no trailing zeros.
    def seconds(ns) = "#{format('%.6f', ns / 1e9).sub(/\.?0+\z/, '')}s"

    # The one median of gvlscope, its lab and its benchmarks: the upper middle of the sorted
    # values (always one of them: an integer stays an integer, a measured run stays a run that
    # was measured), +none+ when there are none.
    def median(values, none: nil) = values.empty? ? none : values.sort[values.size / 2]
  end

  # log2 (DTrace `quantize`) buckets: bucket 0 counts zeros, bucket b >= 1 counts values in
  # [2^(b-1), 2^b). A value's bucket is its bit length.
  module Log2
    BUCKETS = 64

    module_function

    def bucket(value) = value.bit_length
    def lower(bucket) = bucket.zero? ? 0 : 2**(bucket - 1)
    def upper(bucket) = bucket.zero? ? 0 : 2**bucket - 1

    # The bucket holding the q-quantile of +counts+, or nil when they are all zero.
    def quantile_bucket(counts, q)
      total = counts.sum
      return nil if total.zero?

      cumulative = 0
      counts.index { |count| (cumulative += count) >= q * total }
    end
  end

  # Options given by a user (Rack, Puma plugin, flight recorder): one-line GVLScope::Error for an
  # unknown key, at configuration time, never at request time.
  module Options
    module_function

    def reject_unknown!(options, known, owner, what: "option")
      unknown = options.keys - known
      return if unknown.empty?

      raise Error, "#{owner}: unknown #{what} #{unknown.map(&:inspect).join(', ')} (known: #{known.join(', ')})"
    end
  end
end
