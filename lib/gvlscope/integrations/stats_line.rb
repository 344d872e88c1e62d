# frozen_string_literal: true

require_relative "../support/units"

module GVLScope
  # The per-process log line of the Puma plugin and GVLScope::Sidekiq, for an interval (a
  # Metrics::Snapshot difference): GVL held %, threads waiting now and on average, the waits and
  # the p50/p99 of their log2 histogram (a bucket's upper bound, hence "<="), the longest wait.
  module StatsLine
    module_function

    def for(interval, who)
      waits = interval.wait_histogram
      format("gvlscope %s: %.1f s, GVL held %.1f%%, waiting threads now %d (avg %.2f), %d waits, " \
             "wait p50 <= %s, p99 <= %s, longest so far %s",
             who, interval.wall_ns / 1e9, 100 * interval.held_ratio, interval.waiting_threads,
             interval.wall_ns.positive? ? interval.wait_ns.fdiv(interval.wall_ns) : 0.0, waits.sum,
             quantile_text(waits, 0.5), quantile_text(waits, 0.99), Units.ms_or_us(interval.longest_wait_ns))
    end

    # The upper bound of the log2 bucket holding the q-quantile.
    def quantile_text(counts, q)
      bucket = Log2.quantile_bucket(counts, q)
      bucket ? Units.ms_or_us(2**bucket) : "-"
    end
  end
end
