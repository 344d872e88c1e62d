# frozen_string_literal: true

module GVLScope
  class Report
    # A problem the trace shows, in words and numbers. +threads+ names the thread it is about
    # first, then the threads involved; +focus_ns+ is a [start, end] worth looking at in a timeline.
    Finding = Struct.new(:kind, :threads, :title, :evidence, :fix, :focus_ns, keyword_init: true) do
      def thread = threads.first

      def to_h = { kind: kind, thread: thread, threads: threads, title: title, evidence: evidence, fix: fix,
                   focus_ns: focus_ns }

      def to_s = "#{title}\n  fix: #{fix}"
    end

    # Looks for the three GVL problems users hit. Each rule asks for repeated, large effects
    # (several events, each a good part of a timeslice) so that a healthy program gets no finding:
    # none is better than a false one (tests check both ways).
    class Findings
      # Convoy: a thread's waits after blocking calls last about a timeslice. A wait of a quarter
      # timeslice after a blocking call happens only when another thread kept the GVL that long;
      # at a quarter of a thread's blocking calls, it is what that thread's time goes to.
      CONVOY_MIN_WAITS = 3
      CONVOY_SLOW_SHARE = 0.25
      # Hog: released the GVL mostly at the end of its timeslice while others wanted it.
      HOG_MIN_PREEMPTIONS = 2
      HOG_PREEMPTED_SHARE = 0.5
      # Contention: at a quarter of the acquisitions, 4+ other threads were still waiting (a queue
      # of 5 threads for one GVL), and threads spent at least a quarter of the wall time waiting.
      CONTENTION_MIN_ACQUISITIONS = 20
      CONTENTION_CROWDED_SHARE = 0.25
      CONTENTION_WAIT_SHARE = 0.25

      def initialize(report)
        @report = report
        @timeline = report.timeline
        @timeslice_ns = report.timeslice_ns
        @labels = @timeline.threads.transform_values(&:label)
        # Per-thread totals, already summed: a thread that cannot match a rule is skipped without
        # another pass over its intervals (a trace holds millions).
        @rows = report.summary.rows.to_h { |row| [row.serial, row] }
      end

      def all
        @timeline.threads.values.filter_map { |thread| convoy(thread) } +
          @timeline.threads.values.filter_map { |thread| hog(thread) } +
          [contention].compact
      end

      private

      def convoy(thread)
        return if @rows[thread.serial].longest_wait_ns < @timeslice_ns / 4

        waits = waits_after_blocking(thread)
        return if waits.size < CONVOY_MIN_WAITS

        slow = waits.select { |wait| wait.duration_ns >= @timeslice_ns / 4 }
        return if slow.size < CONVOY_MIN_WAITS || slow.size < CONVOY_SLOW_SHARE * waits.size

        holders = shares(@report.blame.after_blocking[thread.serial])
        culprit = holders.find { |holder, _| holder != Blame::HAND_OFF }&.first
        total = waits.sum(&:duration_ns)
        longest = slow.max_by(&:duration_ns)
        Finding.new(
          kind: :convoy,
          threads: [thread.label, *holders.select { |holder, share| holder.is_a?(String) && share >= 0.01 }.keys],
          title: format("Convoy: %s waited for the GVL after %d of its %d blocking calls, median %s " \
                        "(timeslice %s), %s in all; the GVL was held by %s",
                        quote(thread.label), slow.size, waits.size, ms(median(slow.map(&:duration_ns))),
                        ms(@timeslice_ns), ms(total), describe_shares(holders)),
          evidence: { blocking_calls: waits.size, slow_waits: slow.size, median_wait_ns: median(slow.map(&:duration_ns)),
                      wait_after_blocking_ns: total, holders: holders },
          fix: "each blocking call (IO, sleep) gives the GVL away and getting it back costs up to a timeslice " \
               "while #{culprit ? quote(culprit) : 'another thread'} runs Ruby code: move that CPU-bound work to " \
               "another process or a Ractor, lower its Thread#priority, or shorten the timeslice " \
               "(RUBY_THREAD_TIMESLICE, Ruby 3.4+)",
          focus_ns: [longest.start_ns, longest.end_ns]
        )
      end

      def hog(thread)
        released = @rows[thread.serial].released_by
        preempted = released[:preempted]
        releases = released.sum { |cause, count| cause == :exit ? 0 : count }
        return if preempted < HOG_MIN_PREEMPTIONS || preempted < HOG_PREEMPTED_SHARE * releases

        victims = @report.blame.victims_of(thread.serial)
        waited = victims.values.sum
        return if waited < @timeslice_ns

        held = thread.intervals.sum { |interval| %i[running gc].include?(interval.state) ? interval.duration_ns : 0 }
        longest = thread.intervals.select { |interval| interval.state == :running }.max_by(&:duration_ns)
        top = victims.sort_by { |_, ns| -ns }.first(3).map { |serial, ns| "#{quote(@labels[serial])} #{ms(ns)}" }
        Finding.new(
          kind: :hog,
          threads: [thread.label, *victims.keys.map { |serial| @labels[serial] }],
          title: format("Hog: %s gave up the GVL at the end of its timeslice %d of %d times (held it %s, %d%% of " \
                        "the trace) while other threads waited %s for it (%s)",
                        quote(thread.label), preempted, releases, ms(held), percent(held), ms(waited), top.join(", ")),
          evidence: { preempted: preempted, releases: releases, held_ns: held, others_waited_ns: waited,
                      victims: victims.to_h { |serial, ns| [@labels[serial], ns] } },
          fix: "it runs Ruby code without blocking, so every other thread waits a timeslice per turn: if it " \
               "produces work for others (a Queue), bound the queue with a SizedQueue so it blocks when they " \
               "fall behind; otherwise lower its Thread#priority, or move the work to a Ractor or another process",
          focus_ns: [longest.start_ns, longest.end_ns]
        )
      end

      def contention
        counts = @timeline.waiters_at_acquire
        acquisitions = counts.sum
        return if acquisitions < CONTENTION_MIN_ACQUISITIONS

        crowded = counts.drop(3).sum # buckets 3+ hold 4 or more threads still waiting
        return if crowded < CONTENTION_CROWDED_SHARE * acquisitions

        waits = @timeline.threads.values.flat_map do |thread|
          thread.intervals.filter_map { |interval| interval.duration_ns if interval.state == :wants_gvl }
        end
        total = waits.sum
        return if total < CONTENTION_WAIT_SHARE * @report.duration_ns

        most = 2**(counts.rindex(&:positive?) || 1) - 1
        waiting = @timeline.threads.values.select { |thread| thread.intervals.any? { |i| i.state == :wants_gvl } }
        Finding.new(
          kind: :contention,
          threads: waiting.map(&:label),
          title: format("Contention: at %d%% of %d GVL acquisitions 4 or more other threads were still waiting " \
                        "(up to %d); %d threads waited %s in all, median %s per acquisition",
                        100 * crowded / acquisitions, acquisitions, most, waiting.size, ms(total), ms(median(waits))),
          evidence: { acquisitions: acquisitions, crowded_acquisitions: crowded, most_waiters: most,
                      waiting_threads: waiting.size, wait_ns: total, median_wait_ns: median(waits) },
          fix: "more threads want to run Ruby than one GVL can serve: use fewer threads per process (e.g. Puma's " \
               "max threads) and more processes, or Ractors for the CPU-bound part",
          focus_ns: nil
        )
      end

      def waits_after_blocking(thread)
        intervals = thread.intervals
        (1...intervals.size).filter_map do |index|
          wait = intervals[index]
          wait if wait.state == :wants_gvl && intervals[index - 1].state == :waiting
        end
      end

      # { holder label (or "nobody (hand-off)") => share of the wait time }, largest first.
      def shares(holders)
        total = holders.values.sum.to_f
        return {} unless total.positive?

        holders.sort_by { |_, ns| -ns }.to_h do |serial, ns|
          [serial == Blame::HAND_OFF ? Blame::HAND_OFF : @labels.fetch(serial, "thread #{serial}"), (ns / total).round(4)]
        end
      end

      def describe_shares(holders)
        shown = holders.first(3).select { |_, share| share >= 0.01 }
        shown.map do |holder, share|
          "#{holder == Blame::HAND_OFF ? 'nobody (hand-off)' : quote(holder)} #{(100 * share).round}%"
        end.join(", ")
      end

      def median(values)
        return 0 if values.empty?

        values.sort[values.size / 2]
      end

      def percent(ns) = @report.duration_ns.positive? ? (100.0 * ns / @report.duration_ns).round : 0
      def quote(label) = "'#{label}'"
      def ms(ns) = format(ns >= 10_000_000 ? "%.0f ms" : "%.1f ms", ns / 1e6)
    end
  end
end
