# frozen_string_literal: true

require_relative "summary"
require_relative "report/blame"
require_relative "report/findings"

module GVLScope
  # What the GVL did in one trace, and why: per-thread totals, GVL held % per Ractor, log2
  # histograms and findings (convoy, hog, contention), each with evidence and a suggested fix.
  # `gvlscope report` prints it as text (Report::Text), JSON (#to_h, docs/report.md) or HTML
  # (Report::HTML); `gvlscope run` prints its short form.
  class Report
    BUCKETS = 64

    attr_reader :timeline, :summary, :only_thread

    # +thread+: a thread label; the table and findings then show only that thread.
    def initialize(timeline, thread: nil)
      @timeline = timeline
      @summary = Summary.new(timeline)
      @only_thread = thread
      if thread && @summary.rows.none? { |row| row.label == thread }
        raise Error, "no thread named #{thread.inspect} in #{timeline.file.path} " \
                     "(threads: #{@summary.rows.map(&:label).uniq.join(', ')})"
      end
    end

    # Built only when a finding needs to say who held the GVL: it is a pass over every interval.
    def blame = @blame ||= Blame.new(@timeline)

    def file = @timeline.file
    def duration_ns = @timeline.duration_ns
    def timeslice_ns = file.timeslice_ns

    def rows
      return @summary.rows unless @only_thread

      @summary.rows.select { |row| row.label == @only_thread }
    end

    def findings
      @findings ||= begin
        all = Findings.new(self).all
        @only_thread ? all.select { |finding| finding.threads.include?(@only_thread) } : all
      end
    end

    # The share of wall time each Ractor's GVL was held (by a running or collecting thread).
    def held_ratio_by_ractor
      return {} unless duration_ns.positive?

      @summary.rows.group_by(&:ractor_id).transform_values do |rows|
        rows.sum { |row| row.running_ns + row.gc_ns } / duration_ns.to_f
      end
    end

    def wait_ns = rows.sum(&:wants_gvl_ns)

    # log2 histograms (bucket b >= 1 holds values 2**(b-1) ... 2**b - 1; see Metrics):
    # hold_ns, wait_ns, and waiters_at_acquire (other threads still wanting the GVL at each acquire).
    def histograms
      @histograms ||= begin
        holds = Array.new(BUCKETS, 0)
        waits = Array.new(BUCKETS, 0)
        selected_threads.each do |thread|
          hold_ns = nil
          thread.intervals.each do |interval|
            case interval.state
            when :running, :gc
              # A GC inside a hold does not end it: one hold is running (gc running)* up to a release.
              hold_ns = (hold_ns || 0) + interval.duration_ns
              next
            when :wants_gvl
              waits[interval.duration_ns.bit_length] += 1
            end
            holds[hold_ns.bit_length] += 1 if hold_ns
            hold_ns = nil
          end
          holds[hold_ns.bit_length] += 1 if hold_ns
        end
        { hold_ns: holds, wait_ns: waits, waiters_at_acquire: @timeline.waiters_at_acquire }
      end
    end

    def selected_threads
      threads = @timeline.threads.values
      @only_thread ? threads.select { |thread| thread.label == @only_thread } : threads
    end

    # The report as plain data; the schema is in docs/report.md.
    def to_h
      {
        gvlscope_report: 1,
        file: file.path,
        pid: file.pid,
        duration_ns: duration_ns,
        timeslice_ns: timeslice_ns,
        events: file.size,
        dropped_events: file.dropped,
        truncated: file.truncated?,
        wait_ns: wait_ns,
        ractors: held_ratio_by_ractor.map { |id, ratio| { id: id, held_ratio: ratio.round(6) } },
        threads: rows.map { |row| row_hash(row) },
        histograms: histograms.transform_values { |counts| histogram_hash(counts) },
        findings: findings.map(&:to_h),
      }
    end

    private

    def row_hash(row)
      {
        serial: row.serial, name: row.label, ractor_id: row.ractor_id, run_ns: row.running_ns,
        wait_ns: row.wants_gvl_ns, idle_ns: row.waiting_ns, gc_ns: row.gc_ns, holds: row.holds, waits: row.waits,
        longest_wait_ns: row.longest_wait_ns, released_by: row.released_by.transform_keys(&:to_s)
      }
    end

    def histogram_hash(counts)
      counts.each_index.select { |bucket| counts[bucket].positive? }.map do |bucket|
        { from: bucket.zero? ? 0 : 2**(bucket - 1), to: bucket.zero? ? 0 : 2**bucket - 1, count: counts[bucket] }
      end
    end
  end
end
