# frozen_string_literal: true

require_relative "../rule"

module GVLScope
  module Analysis
    module Rules
      # Convoy: a thread's waits after blocking calls last about a timeslice. A wait of a quarter
      # timeslice after a blocking call happens only when another thread kept the GVL that long;
      # at a quarter of a thread's blocking calls, it is what that thread's time goes to. Threads
      # in a convoy behind the same holder (one that held the GVL for half their waiting or more)
      # are one finding, and so are those with no such holder (they hold it for one another).
      class Convoy < Rule
        kind :convoy, title: "convoy", holder: :main_holder,
                      legend: "threads wait about a timeslice for the GVL after their blocking calls (IO, sleep, a lock)"

        MIN_WAITS = 3
        SLOW_SHARE = 0.25
        CULPRIT_SHARE = 0.5

        # Threads in a convoy as one group per holder (the block names a thread's holder, nil when
        # none held the GVL for most of its waiting), in the threads' order: one finding each, here
        # and in `gvlscope top` (Live::Rules), so six workers behind one hog are one line.
        def self.by_holder(rows, &holder) = rows.group_by(&holder)

        def findings
          convoys = @rows.each_value.select { |row| convoy?(row) }
          Convoy.by_holder(convoys) { |row| culprit(row) }.map { |culprit, group| convoy(group, culprit) }
        end

        private

        def convoy?(row)
          slow = row.slow_blocking_waits
          slow >= MIN_WAITS && slow >= SLOW_SHARE * row.blocking_waits
        end

        # The thread that held the GVL for half or more of +row+'s waiting after blocking calls (a
        # serial), or nil.
        def culprit(row)
          holders = @report.blame.after_blocking.fetch(row.serial, {})
          serial, ns = holders.reject { |holder, _| holder == Blame::HAND_OFF }.max_by { |_, held| held }
          serial if ns && ns >= CULPRIT_SHARE * holders.values.sum
        end

        def convoy(group, culprit)
          held_by = Hash.new(0)
          group.each { |row| @report.blame.after_blocking.fetch(row.serial, {}).each { |holder, ns| held_by[holder] += ns } }
          holder_shares = shares(held_by)
          waits = group.sum(&:blocking_waits)
          slow = group.sum(&:slow_blocking_waits)
          medians = group.map(&:median_slow_blocking_wait_ns)
          code = @report.code_locations
          holders = merged_profile(group.map { |row| code.holders_while_waiting(row.serial) })
          sites = code.release_sites(threads: group.map(&:serial))
          alone = group.size == 1
          finding(
            kind: :convoy, about: group,
            others: holder_shares.select { |holder, share| holder.is_a?(String) && share >= 0.01 }.keys,
            # The wait another thread's hold caused; the hand-off itself is no convoy's doing.
            explains_wait_ns: held_by.sum { |holder, ns| holder == Blame::HAND_OFF ? 0 : ns },
            title: format("Convoy: %s waited for the GVL after %d of %s %d blocking calls, %s (timeslice %s), %s in " \
                          "all; the GVL was held by %s%s",
                          alone ? quote(group.first.label) : "#{group.size} threads (#{list(group.map(&:label))})",
                          slow, alone ? "its" : "their", waits, describe_medians(medians), ms(@timeslice_ns),
                          ms(group.sum(&:blocking_wait_ns)), describe_shares(holder_shares),
                          code_sentences(holder_code(holders, "The holder was"),
                                         describe_sites(sites, whose: alone ? "Its" : "Their"))),
            evidence: { blocking_calls: waits, slow_waits: slow, median_wait_ns: Analysis.median(medians),
                        wait_after_blocking_ns: group.sum(&:blocking_wait_ns), holders: holder_shares,
                        **code_evidence(holders, sites) },
            fix: "each blocking call (IO, sleep) gives the GVL away and getting it back costs up to a timeslice " \
                 "while #{culprit ? quote(@labels[culprit]) : 'another thread'} runs Ruby code: move that CPU-bound " \
                 "work to another process or a Ractor, lower its Thread#priority, or shorten the timeslice " \
                 "(RUBY_THREAD_TIMESLICE, Ruby 3.4+)",
            focus_ns: group.filter_map(&:longest_slow_blocking_wait).max_by { |start_ns, end_ns| end_ns - start_ns }
          )
        end

        # "median 101 ms", or for several threads whose medians differ "medians 98-105 ms".
        def describe_medians(medians)
          low, high = medians.minmax.map { |ns| ms(ns) }
          low == high ? "median #{low}" : "medians #{low.delete_suffix(' ms')}-#{high}"
        end
      end
    end
  end
end
