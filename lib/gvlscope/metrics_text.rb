# frozen_string_literal: true

module GVLScope
  # A Metrics::Snapshot as text: totals, a per-thread table and DTrace-style histograms.
  class MetricsText
    def initialize(snapshot)
      @snapshot = snapshot
    end

    def to_s
      s = @snapshot
      lines = []
      lines << format("GVL held %.1f%% of %.3f s wall; %d acquisitions; total wait %s; %d threads waiting now",
                      100 * s.held_ratio, s.wall_ns / 1e9, s.acquisitions, ms(s.wait_ns), s.waiting_threads)
      lines << format("releases: %d blocking (or Thread.pass), %d preempted at the end of a timeslice, %d exit",
                      s.released_blocking, s.released_preempted, s.released_exit)
      lines << ""
      lines << format("%-24s %11s %11s %11s %9s %7s %13s", "thread", "run", "wait", "idle", "gc", "holds", "longest hold")
      s.all_rows.each do |row|
        next if row.equal?(s.exited) && row.holds.zero? && row.waits.zero?

        lines << format("%-24s %11s %11s %11s %9s %7d %13s", row.name.to_s[0, 24], ms(row.run_ns), ms(row.wait_ns),
                        ms(row.idle_ns), ms(row.gc_ns), row.holds, ms(row.longest_hold_ns))
      end
      lines << ""
      lines.concat(self.class.histogram("GVL hold time (us)", s.hold_histogram, scale: 1000))
      lines << ""
      lines.concat(self.class.histogram("wait for the GVL (us)", s.wait_histogram, scale: 1000))
      lines << ""
      lines.concat(self.class.histogram("threads still waiting at acquire", s.waiters_at_acquire_histogram))
      lines.join("\n")
    end

    # DTrace quantize-style rows: value (lower bound of the bucket), a bar, count.
    def self.histogram(title, counts, scale: 1, width: 40)
      lines = [title, format("%12s  %-#{width}s %s", "value", "------------- Distribution -------------", "count")]
      used = counts.each_index.select { |b| counts[b].positive? }
      return lines << "  (none)" if used.empty?

      total = counts.sum
      (used.min..[used.max + 1, counts.size - 1].min).each do |bucket|
        lower = bucket.zero? ? 0 : 2**(bucket - 1)
        bar = "@" * (width * counts[bucket] / total.to_f).round
        lines << format("%12s |%-#{width}s %d", scaled(lower, scale), bar, counts[bucket])
      end
      lines
    end

    def self.scaled(value, scale)
      scale == 1 ? value.to_s : (value / scale.to_f).round(value < scale ? 3 : 0).to_s.sub(/\.0\z/, "")
    end

    private

    def ms(ns) = format("%.1f ms", ns / 1e6)
  end
end
