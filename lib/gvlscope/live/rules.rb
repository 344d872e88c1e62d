# frozen_string_literal: true

require_relative "../support/units"
require_relative "../analysis" # the rules whose thresholds these share (the whole stage: its files load in its order)

module GVLScope
  module Live
    # The findings `gvlscope top` shows as they appear: the live subset of analysis/rules/ that an
    # interval's counters can tell without a timeline (a trace's intervals and blame):
    #
    # - hog:        a thread gave the GVL up mostly at the end of its timeslice (preempted) while
    #               other threads waited at least a timeslice in all (Rules::Hog, without blame:
    #               "others" are all the threads that waited in the interval);
    # - convoy:     threads that release the GVL for blocking calls waited on average a quarter
    #               timeslice per acquisition (Rules::Convoy, from the per-thread mean rather than
    #               each wait after a blocking call), behind the thread that held it most: one
    #               finding per holder (Rules::Convoy.by_holder, as the report groups them);
    # - contention: at a quarter of the acquisitions 4+ other threads were still waiting, and
    #               threads waited at least a quarter of the wall time (Rules::Contention, same
    #               thresholds, from the interval's histogram);
    # - loop_stall: a thread's event loop had a turn of a quarter timeslice or more in the interval
    #               (Rules::LoopStall's threshold for the wait a stall explains): its fibers all
    #               waited for it. The counters know neither the fiber nor its code (a trace does).
    #
    # Each finding is a Hash: kind, thread, threads, title, fix (the report's words, shorter); a
    # convoy's also "holder".
    # The thresholds are the report's rules' own, read from them: one place to tune each.
    module Rules
      HOG = Analysis::Rules::Hog
      CONVOY = Analysis::Rules::Convoy
      CONTENTION = Analysis::Rules::Contention

      # The kinds these find, the report's own (Analysis::KINDS: one title and legend each), in the
      # order `gvlscope top`'s findings header names them.
      KINDS = %i[hog convoy contention loop_stall].map { |name| Analysis::KINDS.fetch(name) }.freeze

      module_function

      def findings(snapshot)
        rows = snapshot.threads.reject { |row| own?(row) }
        [*rows.filter_map { |row| hog(snapshot, row) }, *convoys(snapshot, rows), contention(snapshot),
         *rows.filter_map { |row| loop_stall(snapshot, row) }].compact
      end

      def hog(snapshot, row)
        preempted = row.released_preempted
        releases = row.released_blocking + preempted
        return if preempted < HOG::MIN_PREEMPTIONS || preempted < HOG::PREEMPTED_SHARE * releases

        victims = snapshot.threads.reject { |other| other.serial == row.serial || other.wait_ns.zero? }
        waited = victims.sum(&:wait_ns)
        return if waited < snapshot.timeslice_ns

        finding(:hog, [row, *victims.sort_by { |v| -v.wait_ns }],
                format("Hog: '%s' gave up the GVL at the end of its timeslice %d of %d times (held it %s, %d%%) " \
                       "while other threads waited %s for it", row.label, preempted, releases, ms(row.held_ns),
                       percent(row.held_ns, snapshot), ms(waited)),
                "it runs Ruby without blocking, so each other thread waits a timeslice per turn: bound its work " \
                "(SizedQueue), lower its Thread#priority, or move it to a Ractor or another process")
      end

      # One finding per holder, the waiters behind it together.
      def convoys(snapshot, rows)
        waiting = rows.select { |row| convoy?(snapshot, row) }
        groups = CONVOY.by_holder(waiting) do |row|
          snapshot.threads.reject { |other| other.serial == row.serial }.max_by(&:held_ns)
        end
        groups.filter_map { |holder, group| convoy(snapshot, group, holder) if holder&.held_ns&.positive? }
      end

      def convoy?(snapshot, row)
        row.waits >= CONVOY::MIN_WAITS && row.released_blocking >= CONVOY::MIN_WAITS &&
          row.wait_ns >= row.waits * snapshot.timeslice_ns / 4
      end

      def convoy(snapshot, group, holder)
        waits = group.sum(&:waits)
        waited = group.sum(&:wait_ns)
        who = group.size == 1 ? "'#{group.first.label}'" : "#{group.size} threads (#{Analysis::Rule.list(group.map(&:label))})"
        finding(:convoy, [*group, holder],
                format("Convoy: %s waited for the GVL %s per acquisition on average (%d waits, %s in all, " \
                       "timeslice %s) after %s blocking calls; '%s' held the GVL %d%% of the interval",
                       who, ms(waited / waits), waits, ms(waited), ms(snapshot.timeslice_ns),
                       group.size == 1 ? "its" : "their", holder.label, percent(holder.held_ns, snapshot)),
                "each blocking call gives the GVL away and getting it back costs up to a timeslice while " \
                "'#{holder.label}' runs Ruby: move that CPU work to another process or a Ractor, or shorten " \
                "the timeslice (RUBY_THREAD_TIMESLICE, Ruby 3.4+)").merge("holder" => holder.label)
      end

      def contention(snapshot)
        counts = snapshot.waiters_at_acquire_histogram
        acquisitions = counts.sum
        return if acquisitions < CONTENTION::MIN_ACQUISITIONS

        crowded = counts.drop(3).sum # buckets 3+ hold 4 or more threads still waiting
        return if crowded < CONTENTION::CROWDED_SHARE * acquisitions
        return if snapshot.wait_ns < CONTENTION::WAIT_SHARE * snapshot.wall_ns

        waiting = snapshot.threads.select { |row| row.wait_ns.positive? }.sort_by { |row| -row.wait_ns }
        finding(:contention, waiting,
                format("Contention: at %d%% of %d GVL acquisitions 4 or more other threads were still waiting; " \
                       "%d threads waited %s in all", 100 * crowded / acquisitions, acquisitions, waiting.size,
                       ms(snapshot.wait_ns)),
                "more threads want to run Ruby than one GVL can serve: fewer threads per process and more " \
                "processes, or Ractors for the CPU-bound part")
      end

      def loop_stall(snapshot, row)
        loop = row.loop
        return unless loop && loop.longest_turn_ns >= snapshot.timeslice_ns / 4

        finding(:loop_stall, [row],
                format("Event loop of '%s': longest turn %s (lag p99 %s, %d turns, busy %d%%); its code is unknown " \
                       "live: trace with --fibers to name it", row.label, ms(loop.longest_turn_ns), ms(loop.lag_ns),
                       loop.turns, (100 * loop.busy_share(snapshot.interval_ns)).round),
                "while a fiber runs, every other fiber of its loop waits: make that code faster, give the loop back " \
                "between its parts (`sleep 0`), or run it off the loop")
      end

      # gvlscope's own threads (the live server, the Puma plugin's reporter) are no finding's subject.
      def own?(row) = row.label.to_s.start_with?("gvlscope ")

      def finding(kind, rows, title, fix)
        # An undeclared kind would be missing from top's header.
        raise ArgumentError, "Live::Rules::KINDS has no #{kind.inspect}" unless KINDS.any? { |k| k.name == kind }

        labels = rows.map(&:label)
        { "kind" => kind.to_s, "thread" => labels.first, "threads" => labels, "title" => title, "fix" => fix }
      end

      def ms(ns) = Units.ms_rounded(ns)
      def percent(ns, snapshot) = snapshot.wall_ns.positive? ? (100.0 * ns / snapshot.wall_ns).round : 0
    end
  end
end
