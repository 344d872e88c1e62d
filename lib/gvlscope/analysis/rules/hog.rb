# frozen_string_literal: true

require_relative "../rule"

module GVLScope
  module Analysis
    module Rules
      # Hog: a thread released the GVL mostly at the end of its timeslice while others wanted it.
      class Hog < Rule
        MIN_PREEMPTIONS = 2
        PREEMPTED_SHARE = 0.5

        def findings
          @rows.each_value.filter_map { |row| hog(row) }
        end

        private

        def hog(row)
          released = row.released_by
          preempted = released[:preempted]
          releases = released.sum { |cause, count| cause == :exit ? 0 : count }
          return if preempted < MIN_PREEMPTIONS || preempted < PREEMPTED_SHARE * releases

          victims = @report.blame.victims_of(row.serial)
          waited = victims.values.sum
          return if waited < @timeslice_ns

          held = row.run_ns + row.gc_ns
          top = victims.sort_by { |_, ns| -ns }.first(3).map { |serial, ns| "#{quote(@labels[serial])} #{ms(ns)}" }
          holders = @report.code_locations.holder_profile(thread: row.serial)
          Finding.new(
            kind: :hog,
            threads: [row.label, *victims.keys.map { |serial| @labels[serial] }],
            title: format("Hog: %s gave up the GVL at the end of its timeslice %d of %d times (held it %s, %d%% of " \
                          "the trace) while other threads waited %s for it (%s)%s",
                          quote(row.label), preempted, releases, ms(held), percent(held), ms(waited), top.join(", "),
                          code_sentences(holder_code(holders, "It was"))),
            evidence: { preempted: preempted, releases: releases, held_ns: held, others_waited_ns: waited,
                        victims: victims.to_h { |serial, ns| [@labels[serial], ns] }, **code_evidence(holders, []) },
            fix: "it runs Ruby code without blocking, so every other thread waits a timeslice per turn: if it " \
                 "produces work for others (a Queue), bound the queue with a SizedQueue so it blocks when they " \
                 "fall behind; otherwise lower its Thread#priority, or move the work to a Ractor or another process",
            focus_ns: row.longest_run
          )
        end
      end
    end
  end
end
