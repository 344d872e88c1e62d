# frozen_string_literal: true

require_relative "../rule"

module GVLScope
  module Analysis
    module Rules
      # Hand-off thrash: threads wait for a GVL that nobody holds. A thread that releases the GVL
      # (a blocking call) wakes the next waiter, and until that thread is scheduled the GVL is in
      # transit (Blame::HAND_OFF): microseconds each time. When the holds are shorter than that, the
      # process spends its time handing the GVL around (Beazley's multicore "GIL battle"): the GVL is
      # mostly free, yet the threads mostly wait. All of these, per Ractor:
      # - the GVL was held less than half the time (mostly free);
      # - each thrashing thread waited 100+ times (repeated, not a few long stalls: a hand-off takes
      #   microseconds, so 100 of them are still far from a timeslice) and spent a tenth of its
      #   lifetime waiting while nobody held the GVL; at least two threads (a hand-off has two ends);
      # - together they waited that way a quarter of the wall time or more, and that is half or
      #   more of the Ractor's GVL wait (the waiting is the transit, not another thread's hold);
      # - a wait lasts twice a hold or more on average: the wake-up costs more than the work it guards.
      class HandOff < Rule
        kind :hand_off, title: "hand-off thrash",
                        legend: "threads wait for a GVL that nobody holds: it spends its time being handed over"

        MAX_HELD_RATIO = 0.5
        MIN_WAITS = 100
        THREAD_SHARE = 0.1
        WALL_SHARE = 0.25
        WAIT_SHARE = 0.5
        WAIT_TO_HOLD = 2.0

        def findings
          held = @report.held_ratio_by_ractor
          @rows.each_value.group_by(&:ractor_id).filter_map { |ractor_id, rows| thrash(rows, held.fetch(ractor_id, 0.0)) }
        end

        private

        def thrash(rows, held_ratio)
          return if held_ratio >= MAX_HELD_RATIO

          thrashing = rows.select do |row|
            row.waits >= MIN_WAITS && hand_off_ns(row.serial) >= THREAD_SHARE * (row.run_ns + row.wait_ns + row.idle_ns + row.gc_ns)
          end
          return if thrashing.size < 2

          hand_off = thrashing.sum { |row| hand_off_ns(row.serial) }
          return if hand_off <= 0 || hand_off < WALL_SHARE * @report.duration_ns || hand_off < WAIT_SHARE * rows.sum(&:wait_ns)

          mean_wait = thrashing.sum(&:wait_ns).fdiv(thrashing.sum(&:waits))
          holds = rows.sum(&:holds)
          mean_hold = holds.positive? ? rows.sum(&:held_ns).fdiv(holds) : 0.0
          ratio = mean_hold.positive? ? mean_wait / mean_hold : Float::INFINITY
          return if ratio < WAIT_TO_HOLD

          sites = @report.code_locations.release_sites(threads: thrashing.map(&:serial))
          waited = thrashing.sum(&:wait_ns)
          finding(
            kind: :hand_off, about: thrashing, explains_wait_ns: hand_off,
            title: format("Hand-off thrash: %s waited %s for the GVL while nobody held it (%d%% of their wait), " \
                          "though it was held only %.0f%% of the time: a wait lasted %.1fx a hold (mean %s vs %s), " \
                          "so waking the next thread cost more than the work it did with the GVL%s",
                          thrashing.size == 1 ? quote(thrashing.first.label) : "#{thrashing.size} threads (#{list(thrashing.map(&:label))})",
                          ms(hand_off), (100.0 * hand_off / waited).round, 100 * held_ratio, ratio,
                          Units.ms_or_us(mean_wait.round), Units.ms_or_us(mean_hold.round),
                          code_sentences(describe_sites(sites, whose: "Their"))),
            evidence: { thrashing_threads: thrashing.size, hand_off_wait_ns: hand_off, wait_ns: waited,
                        held_ratio: held_ratio.round(4), mean_wait_ns: mean_wait.round, mean_hold_ns: mean_hold.round,
                        wait_to_hold_ratio: ratio.finite? ? ratio.round(2) : nil, **code_evidence([], sites) },
            fix: "every release of the GVL wakes a waiting thread, and the wake-up takes longer than the work done " \
                 "with the GVL: #{thread_count_fix}; batch small blocking calls (read and write larger chunks, " \
                 "buffer, fewer syscalls), or keep short C calls under the GVL (a C extension need not release it " \
                 "for a call of a few microseconds)",
            focus_ns: thrashing.max_by { |row| hand_off_ns(row.serial) }.longest_wait
          )
        end
      end
    end
  end
end
