# frozen_string_literal: true

require_relative "../rule"

module GVLScope
  module Analysis
    module Rules
      # Contention: at a quarter of the acquisitions, 4+ other threads were still waiting (a queue
      # of 5 threads for one GVL), and threads spent at least a quarter of the wall time waiting.
      # When CPU-bound threads held the GVL for most of that wait, the cause is theirs: the Hog
      # finding ("N CPU-bound threads share one GVL") says it, and this one stays out.
      class Contention < Rule
        kind :contention, title: "contention",
                          legend: "many threads queue for one GVL at once and spend a good part of the time waiting"

        MIN_ACQUISITIONS = 20
        CROWDED_SHARE = 0.25
        WAIT_SHARE = 0.25
        CPU_BOUND_SHARE = 0.75

        def findings
          [contention].compact
        end

        private

        def contention
          counts = @timeline.waiters_at_acquire
          acquisitions = counts.sum
          return if acquisitions < MIN_ACQUISITIONS

          crowded = counts.drop(3).sum # buckets 3+ hold 4 or more threads still waiting
          return if crowded < CROWDED_SHARE * acquisitions

          waiting = @rows.values.select { |row| row.waits.positive? }
          total = waiting.sum(&:wait_ns)
          return if total < WAIT_SHARE * @report.duration_ns

          cpu_bound = @rows.each_value.select { |row| cpu_bound?(row) }.sum { |row| @report.blame.waited_on(row.serial) }
          return if cpu_bound >= CPU_BOUND_SHARE * total

          most = Log2.upper(counts.rindex(&:positive?) || 1)
          median_wait = @report.all_waits_median_ns
          finding(
            kind: :contention, about: waiting, explains_wait_ns: total,
            title: format("Contention: at %d%% of %d GVL acquisitions 4 or more other threads were still waiting " \
                          "(up to %d); %d threads waited %s in all, median %s per acquisition",
                          100 * crowded / acquisitions, acquisitions, most, waiting.size, ms(total), ms(median_wait)),
            evidence: { acquisitions: acquisitions, crowded_acquisitions: crowded, most_waiters: most,
                        waiting_threads: waiting.size, wait_ns: total, median_wait_ns: median_wait },
            fix: "more threads want to run Ruby than one GVL can serve: #{thread_count_fix}; and more processes, " \
                 "or Ractors for the CPU-bound part",
            focus_ns: nil
          )
        end
      end
    end
  end
end
