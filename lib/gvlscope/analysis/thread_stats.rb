# frozen_string_literal: true

require_relative "../units"
require_relative "../vocabulary"
require_relative "../model/scan"
require_relative "io_overlap"

module GVLScope
  module Analysis
    # Per-thread totals of a timeline: time in each state, holds, waits, the longest wait and what
    # ended each run (Vocabulary::RELEASE_CAUSES), plus what the finding rules ask of one thread
    # (docs: /work/report-engine-contract.md's Row fields; a streaming engine fills the same Row).
    class ThreadStats
      # +created_at+: where the thread was created ("app.rb:12"), when the trace recorded it.
      # +longest_run+, +longest_wait+, +longest_slow_blocking_wait+, +longest_gc+: [start_ns, end_ns] or nil (the
      # first of equals). A blocking wait is a :wait right after an :idle (the wait to get the GVL
      # back after a blocking call); a slow one lasts timeslice / 4 or more. Medians are
      # Analysis.median (values.sort[size / 2], 0 when none).
      # A hold streak is a thread's work between pauses: from a hold to the last hold before an idle
      # of timeslice / 4 or more, across preemptions, GVL waits and shorter idles (a log write, a
      # lock). A long one held the GVL (run + gc) a timeslice or more and ended in such a pause: a
      # request or job that ran Ruby code that long before its thread went back to waiting for
      # work (a streak cut by the exit or the trace's end is not counted). +long_streaks+ counts them,
      # +long_streak_held_ns+ sums their holds, +longest_streak+ is the one that held the most
      # ([first hold's start, last hold's end], the first of equals) and +longest_streak_held_ns+ what it held.
      # +idle_by_reason+: idle ns by idle reason (Vocabulary::IDLE_REASONS; reasons with idle time
      # only); +io_overlap_wait_ns+: the GVL wait IO it had started overlapped (IOOverlap).
      Row = Struct.new(:serial, :label, :created_at, :ractor_id, :run_ns, :wait_ns, :idle_ns, :gc_ns, :holds, :waits,
                       :longest_wait_ns, :released_by, :longest_run, :longest_wait, :blocking_waits,
                       :slow_blocking_waits, :blocking_wait_ns, :median_slow_blocking_wait_ns,
                       :longest_slow_blocking_wait, :median_wait_ns, :longest_gc, :long_streaks, :long_streak_held_ns,
                       :longest_streak, :longest_streak_held_ns, :idle_by_reason, :io_overlap_wait_ns,
                       keyword_init: true)

      attr_reader :rows, :timeline, :median_wait_ns

      # +timeline+: a Model::Timeline (rows summed from its intervals) or a Model::Scan (the
      # engine summed the same as the intervals closed).
      def initialize(timeline)
        @timeline = timeline
        @slow_wait_ns = timeline.file.timeslice_ns / 4
        if timeline.is_a?(Model::Scan)
          @rows = timeline.threads.values.map { |thread| row_from_scan(thread, timeline.thread_rows[thread.serial]) }
          @median_wait_ns = timeline.all_waits_median_ns
          return
        end

        all_waits = []
        @rows = timeline.threads.values.map { |thread| row_for(thread, all_waits) }
        # The median of every GVL wait of every thread (the whole trace, whatever --thread shows).
        @median_wait_ns = Analysis.median(all_waits)
      end

      # Time some thread held the GVL (running or collecting), all Ractors together.
      def held_ns
        rows.sum { |row| row.run_ns + row.gc_ns }
      end

      private

      def row_for(thread, all_waits)
        totals = Hash.new(0)
        released = Hash.new(0)
        holds = 0
        longest_run = longest_wait = longest_gc = nil
        waits = []
        slow_blocking = []
        blocking = []
        previous = nil
        streaks = Streaks.new(@slow_wait_ns, @timeline.file.timeslice_ns)
        idle_by_reason = Hash.new(0)
        overlap = IOOverlap.new
        thread.intervals.each do |interval|
          totals[interval.state] += interval.duration_ns
          streaks.add(interval.state, interval.start_ns, interval.end_ns)
          overlap.add(interval.state, interval.duration_ns)
          idle_by_reason[interval.reason] += interval.duration_ns if interval.state == :idle && interval.duration_ns.positive?
          case interval.state
          when :run
            holds += 1 unless previous&.state == :gc # a GC inside a hold splits it, it is still one hold
            released[interval.reason] += 1 if interval.reason
            longest_run = interval if longest_run.nil? || interval.duration_ns > longest_run.duration_ns
          when :gc
            longest_gc = interval if longest_gc.nil? || interval.duration_ns > longest_gc.duration_ns
          when :wait
            waits << interval.duration_ns
            longest_wait = interval if longest_wait.nil? || interval.duration_ns > longest_wait.duration_ns
            if previous&.state == :idle
              blocking << interval.duration_ns
              slow_blocking << interval if interval.duration_ns >= @slow_wait_ns
            end
          end
          previous = interval
        end
        streaks.close
        all_waits.concat(waits)
        longest_slow = slow_blocking.max_by(&:duration_ns) # max_by keeps the first of equals
        Row.new(serial: thread.serial, label: thread.label, created_at: thread.info.created_at,
                ractor_id: thread.ractor_id, run_ns: totals[:run],
                wait_ns: totals[:wait], idle_ns: totals[:idle], gc_ns: totals[:gc], holds: holds,
                waits: waits.size, longest_wait_ns: longest_wait&.duration_ns || 0, released_by: released,
                longest_run: span(longest_run), longest_wait: span(longest_wait),
                blocking_waits: blocking.size, slow_blocking_waits: slow_blocking.size,
                blocking_wait_ns: blocking.sum,
                median_slow_blocking_wait_ns: Analysis.median(slow_blocking.map(&:duration_ns)),
                longest_slow_blocking_wait: span(longest_slow), median_wait_ns: Analysis.median(waits),
                longest_gc: span(longest_gc), idle_by_reason: idle_by_reason, io_overlap_wait_ns: overlap.counted,
                **streaks.to_h)
      end

      # A thread's hold streaks (see Row), from its intervals in order; ext/gvlscope_engine/pass.c
      # (streak_add) sums the same.
      class Streaks
        def initialize(pause_ns, long_ns)
          @pause_ns = pause_ns
          @long_ns = long_ns
          @start_ns = nil
          @to_h = { long_streaks: 0, long_streak_held_ns: 0, longest_streak: nil, longest_streak_held_ns: 0 }
        end

        attr_reader :to_h

        def add(state, start_ns, end_ns)
          case state
          when :run, :gc
            unless @start_ns
              @start_ns = start_ns
              @held_ns = 0
            end
            @held_ns += end_ns - start_ns
            @last_end_ns = end_ns
          when :idle then close(paused: true) if end_ns - start_ns >= @pause_ns
          when :exited, :started then close
          end
        end

        def close(paused: false)
          return unless @start_ns

          held = @held_ns
          if paused && held >= @long_ns
            @to_h[:long_streaks] += 1
            @to_h[:long_streak_held_ns] += held
            if held > @to_h[:longest_streak_held_ns]
              @to_h[:longest_streak] = [@start_ns, @last_end_ns]
              @to_h[:longest_streak_held_ns] = held
            end
          end
          @start_ns = nil
        end
      end

      def span(interval) = interval && [interval.start_ns, interval.end_ns]

      # The engine's sums (Engine::Pass#threads): nil for a thread of the thread table that never
      # appeared in an event.
      def row_from_scan(thread, sums)
        _serial, _ractor, run, wait, idle, gc, holds, waits, longest_wait_ns, released, longest_run, longest_wait,
          blocking, slow, blocking_ns, median_slow, longest_slow, median_wait = sums || [nil, nil, 0, 0, 0, 0, 0, 0, 0, []]
        longest_gc = sums&.at(23)
        long_streaks, long_streak_held_ns, longest_streak, longest_streak_held_ns, idle_by_reason, io_overlap = sums&.[](24, 6)
        Row.new(serial: thread.serial, label: thread.label, created_at: thread.info.created_at,
                ractor_id: thread.ractor_id, run_ns: run, wait_ns: wait, idle_ns: idle, gc_ns: gc, holds: holds,
                waits: waits, longest_wait_ns: longest_wait_ns,
                released_by: released.each_with_object(Hash.new(0)) { |(code, count), by| by[Model::Scan::REASONS[code]] = count },
                longest_run: longest_run, longest_wait: longest_wait, blocking_waits: blocking || 0,
                slow_blocking_waits: slow || 0, blocking_wait_ns: blocking_ns || 0,
                median_slow_blocking_wait_ns: median_slow || 0, longest_slow_blocking_wait: longest_slow,
                median_wait_ns: median_wait || 0, longest_gc: longest_gc, long_streaks: long_streaks || 0,
                long_streak_held_ns: long_streak_held_ns || 0, longest_streak: longest_streak,
                longest_streak_held_ns: longest_streak_held_ns || 0,
                idle_by_reason: (idle_by_reason || []).each_with_object(Hash.new(0)) { |(code, ns), by| by[Model::Scan::REASONS[code]] = ns },
                io_overlap_wait_ns: io_overlap || 0)
      end
    end

    # The median the report uses everywhere (Units.median), 0 when none.
    def self.median(values) = Units.median(values, none: 0)
  end
end
