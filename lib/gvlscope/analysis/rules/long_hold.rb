# frozen_string_literal: true

require_relative "../rule"

module GVLScope
  module Analysis
    module Rules
      # Long hold: a request or job that ran Ruby code for a timeslice or more (a long hold streak,
      # ThreadStats::Row: its holds between pauses, across preemptions and short waits) on a
      # worker thread (Rule#worker?: boot and plain scripts are no request) while other threads
      # waited a timeslice or more for its thread. A server's pool thread running a 300 ms
      # request releases the GVL at blocking calls more often than it is preempted, so it is no Hog,
      # and each of its victims waits a few times only, so they are no Convoy: this names it. A
      # thread the Hog rule reports (Rule#hog?: CPU-bound, and not mostly in such streaks) stays
      # out. Threads whose holds ran the same code (their holder samples' top method) are one
      # finding: one route or job class. Holds are wall time: where the trace sampled CPU time, a
      # streak is long when it *ran* a timeslice (ThreadStats::Row), and the title says what of the
      # longest the OS kept off a CPU (an overloaded machine) rather than blaming the code for it.
      class LongHold < Rule
        kind :long_hold, title: "long hold", holder: :about,
                         legend: "a request or job holds the GVL a timeslice or more while other threads wait"

        def findings
          holders = @rows.each_value.select { |row| long_holder?(row) }
          holders.group_by { |row| code_of(row) || row.serial }.map { |_, group| long_hold(group) }
        end

        private

        def long_holder?(row)
          row.long_streaks.positive? && worker?(row) && !hog?(row) && @report.blame.waited_on(row.serial) >= @timeslice_ns
        end

        def profile(row) = (@profiles ||= {})[row.serial] ||= @report.code_locations.holder_profile(thread: row.serial)

        # The method and file of the code the thread ran while others waited, nil without samples.
        def code_of(row)
          top = profile(row).first or return nil
          [top.frame.label, top.frame.path]
        end

        def long_hold(group)
          victims = Hash.new(0)
          group.each { |row| @report.blame.victims_of(row.serial).each { |serial, ns| victims[serial] += ns } }
          waited = victims.values.sum
          longest = group.max_by(&:longest_streak_running_ns)
          streaks = group.sum(&:long_streaks)
          held = group.sum(&:long_streak_held_ns)
          holders = merged_profile(group.map { |row| profile(row) })
          top = holders.first
          start_ns, end_ns = longest.longest_streak
          finding(
            kind: :long_hold, about: group, others: victims.keys.map { |serial| @labels[serial] }, explains_wait_ns: waited,
            title: format("Long hold: %s held the GVL %s in one stretch (%s from its first hold to its last, on %s; %s)%s " \
                          "while %d other thread%s waited %s for %s (%s)%s",
                          top ? "a request or job running #{top.name}" : "a request or job", ms(longest.longest_streak_held_ns),
                          ms(end_ns - start_ns), quote(longest.label), describe_streaks(group, streaks, held), off_cpu_clause(longest),
                          victims.size, victims.size == 1 ? "" : "s", ms(waited), group.size == 1 ? "it" : "them",
                          top_victims(victims),
                          code_sentences(holder_code(holders, group.size == 1 ? "Its thread was" : "Their threads were"))),
            evidence: { long_streaks: streaks, long_streak_held_ns: held, longest_streak_held_ns: longest.longest_streak_held_ns,
                        longest_streak_ns: end_ns - start_ns, **off_cpu_evidence(group, longest),
                        threads: group.map(&:label), others_waited_ns: waited,
                        victims: victims.to_h { |serial, ns| [@labels[serial], ns] }, **code_evidence(holders, []) },
            fix: "while a request or job runs Ruby code that long, every other thread of the process that wants the " \
                 "GVL waits up to a timeslice (#{ms(@timeslice_ns)}) per turn: make that code faster, run it as a " \
                 "background job in a process of its own (or a Ractor), or route such requests to processes of " \
                 "their own so quick ones do not queue behind them",
            focus_ns: longest.longest_streak
          )
        end

        # ", of which 210 ms running on a CPU: the OS kept it off a CPU for the rest (the machine was
        # overloaded: load 17.0 on 2 CPUs)," where CPU samples measured some of the stretch off a CPU.
        def off_cpu_clause(row)
          return "" unless row.longest_streak_off_cpu_ns.to_i.positive?

          machine = @report.file.machine
          overloaded = machine&.overloaded? ? format(" (the machine was overloaded: load %.1f on %d CPUs)", machine.load, machine.cpus) : ""
          format(", of which %s running on a CPU: the OS kept it off a CPU for the rest%s,", ms(row.longest_streak_running_ns), overloaded)
        end

        # Evidence of the time off a CPU, in a trace that sampled CPU time only.
        def off_cpu_evidence(group, longest)
          return {} if longest.longest_streak_off_cpu_ns.nil?

          { longest_streak_off_cpu_ns: longest.longest_streak_off_cpu_ns, long_streak_off_cpu_ns: group.sum(&:long_streak_off_cpu_ns) }
        end

        # "no other such stretch" / "3 such stretches on 2 threads, 900 ms held in all".
        def describe_streaks(group, streaks, held)
          return "no other such stretch" if streaks == 1

          "#{streaks} such stretches#{group.size > 1 ? " on #{group.size} threads" : ''}, #{ms(held)} held in all"
        end
      end
    end
  end
end
