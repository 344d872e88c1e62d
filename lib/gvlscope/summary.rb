# frozen_string_literal: true

module GVLScope
  # Per-thread totals of a timeline, as numbers and as a table.
  class Summary
    Row = Struct.new(:serial, :label, :ractor_id, :running_ns, :wants_gvl_ns, :waiting_ns, :gc_ns, :holds, :waits,
                     :longest_wait_ns, :released_by, keyword_init: true)

    attr_reader :rows, :timeline

    def initialize(timeline)
      @timeline = timeline
      @rows = timeline.threads.values.map { |thread| row_for(thread) }
    end

    def held_ns
      rows.sum { |row| row.running_ns + row.gc_ns }
    end

    def to_s
      file = @timeline.file
      duration = @timeline.duration_ns
      lines = []
      lines << format("%s: %.3f s, %d events, %d threads%s", file.path, duration / 1e9, file.size, rows.size,
                      file.dropped.positive? ? ", #{file.dropped} events dropped" : "")
      lines << format("GVL held %.1f%% of the time", duration.positive? ? 100.0 * held_ns / duration : 0)
      lines << ""
      lines.concat(self.class.table(rows))
      lines.join("\n")
    end

    # The per-thread table, most waiting first.
    def self.table(rows)
      lines = [format("%-24s %10s %10s %10s %8s %12s %6s %6s  %s", "thread", "run", "wait", "idle", "gc",
                      "longest wait", "holds", "waits", "released by")]
      rows.sort_by { |row| -row.wants_gvl_ns }.each do |row|
        released = row.released_by.map { |cause, count| "#{cause} #{count}" }.join(", ")
        lines << format("%-24s %10s %10s %10s %8s %12s %6d %6d  %s", row.label[0, 24], ms(row.running_ns),
                        ms(row.wants_gvl_ns), ms(row.waiting_ns), ms(row.gc_ns), ms(row.longest_wait_ns), row.holds,
                        row.waits, released)
      end
      lines
    end

    def self.ms(ns) = format("%.1f ms", ns / 1e6)

    private

    def row_for(thread)
      totals = Hash.new(0)
      released = Hash.new(0)
      holds = waits = longest = 0
      previous = nil
      thread.intervals.each do |interval|
        totals[interval.state] += interval.duration_ns
        case interval.state
        when :running
          holds += 1 unless previous&.state == :gc # a GC inside a hold splits it, it is still one hold
          released[interval.detail] += 1 if interval.detail
        when :wants_gvl
          waits += 1
          longest = interval.duration_ns if interval.duration_ns > longest
        end
        previous = interval
      end
      Row.new(serial: thread.serial, label: thread.label, ractor_id: thread.ractor_id, running_ns: totals[:running],
              wants_gvl_ns: totals[:wants_gvl], waiting_ns: totals[:waiting], gc_ns: totals[:gc], holds: holds,
              waits: waits, longest_wait_ns: longest, released_by: released)
    end
  end
end
