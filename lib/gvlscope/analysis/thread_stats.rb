# frozen_string_literal: true

require_relative "../support/units"
require_relative "../support/vocabulary"
require_relative "../support/counters"
require_relative "../model/scan"

module GVLScope
  module Analysis
    # Per-thread totals of a trace: time in each state, holds, waits, the longest wait and what
    # ended each run (Vocabulary::RELEASE_CAUSES), plus what the finding rules ask of one thread,
    # as the engine summed them (ext/gvlscope_engine/pass.c).
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
      # only); +io_overlap_wait_ns+: the GVL wait IO it had started overlapped (the hook's rule,
      # ext/gvlscope/metrics_event.h; AdvisorInputs::QUICK_RELEASE_NS).
      # Holds are wall time. In a trace that sampled its native threads' CPU time (format version 3),
      # +held_off_cpu_ns+ is the part of run + gc the OS measurably kept the thread off a CPU (an
      # overloaded machine, SIGSTOP; measured between the CPU samples inside each hold, docs/format.md),
      # and a streak is long when it *ran* a timeslice or more (held less off CPU);
      # +long_streak_off_cpu_ns+ and +longest_streak_off_cpu_ns+ are the off-CPU parts of
      # +long_streak_held_ns+ and +longest_streak_held_ns+. All three nil without CPU samples.
      Row = Struct.new(:serial, :label, :created_at, :ractor_id, :run_ns, :wait_ns, :idle_ns, :gc_ns, :holds, :waits,
                       :longest_wait_ns, :released_by, :longest_run, :longest_wait, :blocking_waits,
                       :slow_blocking_waits, :blocking_wait_ns, :median_slow_blocking_wait_ns,
                       :longest_slow_blocking_wait, :median_wait_ns, :longest_gc, :long_streaks, :long_streak_held_ns,
                       :longest_streak, :longest_streak_held_ns, :idle_by_reason, :io_overlap_wait_ns,
                       :held_off_cpu_ns, :long_streak_off_cpu_ns, :longest_streak_off_cpu_ns,
                       keyword_init: true) do
        include Counters::Sums # held_ns, total_ns, the ratios, #counters

        # Every release, whatever its cause (released_by: cause => count).
        def releases = released_by.values.sum

        # What the longest streak ran on a CPU: its hold, less what was measured off a CPU.
        def longest_streak_running_ns = longest_streak_held_ns - longest_streak_off_cpu_ns.to_i
      end

      attr_reader :rows, :timeline, :median_wait_ns

      # +timeline+: a Model::Scan (the engine summed the rows as the intervals closed).
      def initialize(timeline)
        @timeline = timeline
        @rows = timeline.threads.values.map { |thread| row_from_scan(thread, timeline.thread_rows[thread.serial]) }
        # The median of every GVL wait of every thread (the whole trace, whatever --thread shows).
        @median_wait_ns = timeline.all_waits_median_ns
      end

      # Time some thread held the GVL (running or collecting), all Ractors together.
      def held_ns
        rows.sum(&:held_ns)
      end

      # The share of +duration_ns+ each Ractor's GVL was held (by a running or collecting thread):
      # one GVL each, so each share is at most 1 where their sum is not.
      def held_ratio_by_ractor(duration_ns)
        return {} unless duration_ns.positive?

        rows.group_by(&:ractor_id).transform_values { |same| same.sum(&:held_ns) / duration_ns.to_f }
      end

      private

      # The Row fields the engine sums (Engine::ThreadRow) under the same names, as they are (0 for a
      # thread that never appeared in an event), ...
      SUMMED = %i[run_ns wait_ns idle_ns gc_ns holds waits longest_wait_ns blocking_waits slow_blocking_waits
                  blocking_wait_ns median_slow_blocking_wait_ns median_wait_ns long_streaks long_streak_held_ns
                  longest_streak_held_ns io_overlap_wait_ns].freeze
      # ... [start_ns, end_ns] or nil, ...
      SPANS = %i[longest_run longest_wait longest_slow_blocking_wait longest_gc longest_streak].freeze
      # ... and measured only in a trace that sampled CPU time (nil without).
      OFF_CPU = %i[held_off_cpu_ns long_streak_off_cpu_ns longest_streak_off_cpu_ns].freeze

      # The engine's sums (an Engine::ThreadRow): nil for a thread of the thread table that never
      # appeared in an event.
      def row_from_scan(thread, sums)
        cpu_sampled = @timeline.respond_to?(:cpu_sampled?) && @timeline.cpu_sampled?
        fields = SUMMED.to_h { |name| [name, sums ? sums[name] : 0] }
        SPANS.each { |name| fields[name] = sums && sums[name] }
        OFF_CPU.each { |name| fields[name] = cpu_sampled ? (sums ? sums[name] : 0) : nil }
        Row.new(serial: thread.serial, label: thread.label, created_at: thread.info.created_at, ractor_id: thread.ractor_id,
                released_by: by_reason(sums&.released_by), idle_by_reason: by_reason(sums&.idle_by_reason), **fields)
      end

      # reason => Integer of the engine's [[reason code, Integer], ...].
      def by_reason(pairs)
        (pairs || []).each_with_object(Hash.new(0)) { |(code, value), by| by[Model::Scan::REASONS[code]] = value }
      end
    end

    # The median the report uses everywhere (Units.median), 0 when none.
    def self.median(values) = Units.median(values, none: 0)
  end
end
