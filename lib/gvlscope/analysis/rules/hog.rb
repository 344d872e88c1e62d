# frozen_string_literal: true

require_relative "../rule"

module GVLScope
  module Analysis
    module Rules
      # Hog: a thread released the GVL mostly at the end of its timeslice (Rule#cpu_bound?) while
      # others waited a timeslice or more for it. Hogs that waited a quarter timeslice for each
      # other took turns on one GVL: one finding, "N CPU-bound threads share one GVL" (a wait that
      # long happens only while another thread keeps the GVL, as in Convoy).
      class Hog < Rule
        kind :hog, title: "hog", holder: :about,
                   legend: "a CPU-bound thread keeps the GVL for whole timeslices while other threads wait"

        def findings
          hogs = @rows.each_value.select { |row| hog?(row) }.map(&:serial)
          connected(hogs, @report.blame.all_waits, @timeslice_ns / 4).map do |serials|
            serials.size == 1 ? alone(@rows[serials.first]) : shared(serials.map { |serial| @rows[serial] })
          end
        end

        private

        def alone(row)
          victims = @report.blame.victims_of(row.serial)
          waited = victims.values.sum
          held = row.held_ns
          holders = @report.code_locations.holder_profile(thread: row.serial)
          finding(
            kind: :hog, about: [row], others: victims.keys.map { |serial| @labels[serial] }, explains_wait_ns: waited,
            title: format("Hog: %s gave up the GVL at the end of its timeslice %d of %d times (held it %s, %d%% of " \
                          "the trace) while other threads waited %s for it (%s)%s",
                          quote(row.label), row.released_by[:preempted], releases(row), ms(held), percent(held), ms(waited),
                          top_victims(victims), code_sentences(holder_code(holders, "It was"))),
            evidence: { preempted: row.released_by[:preempted], releases: releases(row), held_ns: held,
                        others_waited_ns: waited, victims: victims.to_h { |serial, ns| [@labels[serial], ns] },
                        **code_evidence(holders, []) },
            fix: "it runs Ruby code without blocking, so every other thread waits a timeslice per turn: if it " \
                 "produces work for others (a Queue), bound the queue with a SizedQueue so it blocks when they " \
                 "fall behind; otherwise lower its Thread#priority, or move the work to a Ractor or another process",
            focus_ns: row.longest_run
          )
        end

        def shared(group)
          victims = Hash.new(0)
          group.each { |row| @report.blame.victims_of(row.serial).each { |serial, ns| victims[serial] += ns } }
          waited = victims.values.sum
          held = group.sum(&:held_ns)
          preempted = group.sum { |row| row.released_by[:preempted] }
          releases = group.sum { |row| releases(row) }
          holders = merged_profile(group.map { |row| @report.code_locations.holder_profile(thread: row.serial) })
          members = group.map(&:label)
          finding(
            kind: :hog, about: group, others: victims.keys.map { |serial| @labels[serial] }, explains_wait_ns: waited,
            title: format("Hog: %d CPU-bound threads share one GVL (%s): they gave up the GVL at the end of their " \
                          "timeslice %d of %d times and held it %s (%d%% of the trace) while threads waited %s for " \
                          "them, each other included%s",
                          group.size, list(members), preempted, releases, ms(held), percent(held), ms(waited),
                          code_sentences(holder_code(holders, "They were"))),
            evidence: { sharing_threads: group.size, preempted: preempted, releases: releases, held_ns: held,
                        others_waited_ns: waited, victims: victims.to_h { |serial, ns| [@labels[serial], ns] },
                        **code_evidence(holders, []) },
            fix: "they run Ruby code in turns, one timeslice each, so #{group.size} threads get no more done than one: " \
                 "run the CPU-bound work in Ractors or processes (about one per core) instead of threads; if it " \
                 "produces work for others (a Queue), bound the queue with a SizedQueue",
            focus_ns: group.filter_map(&:longest_run).max_by { |start_ns, end_ns| end_ns - start_ns }
          )
        end
      end
    end
  end
end
