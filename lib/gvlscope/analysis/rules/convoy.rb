# frozen_string_literal: true

require_relative "../rule"

module GVLScope
  module Analysis
    module Rules
      # Convoy: a thread's waits after blocking calls last about a timeslice. A wait of a quarter
      # timeslice after a blocking call happens only when another thread kept the GVL that long;
      # at a quarter of a thread's blocking calls, it is what that thread's time goes to.
      class Convoy < Rule
        MIN_WAITS = 3
        SLOW_SHARE = 0.25

        def findings
          @rows.each_value.filter_map { |row| convoy(row) }
        end

        private

        def convoy(row)
          waits = row.blocking_waits
          slow = row.slow_blocking_waits
          return if slow < MIN_WAITS || slow < SLOW_SHARE * waits

          holder_shares = shares(@report.blame.after_blocking[row.serial])
          culprit = holder_shares.find { |holder, _| holder != Blame::HAND_OFF }&.first
          total = row.blocking_wait_ns
          median_slow = row.median_slow_blocking_wait_ns
          code = @report.code_locations
          holders = code.holders_while_waiting(row.serial)
          sites = code.release_sites(threads: [row.serial])
          Finding.new(
            kind: :convoy,
            threads: [row.label, *holder_shares.select { |holder, share| holder.is_a?(String) && share >= 0.01 }.keys],
            title: format("Convoy: %s waited for the GVL after %d of its %d blocking calls, median %s " \
                          "(timeslice %s), %s in all; the GVL was held by %s%s",
                          quote(row.label), slow, waits, ms(median_slow),
                          ms(@timeslice_ns), ms(total), describe_shares(holder_shares),
                          code_sentences(holder_code(holders, "The holder was"), describe_sites(sites))),
            evidence: { blocking_calls: waits, slow_waits: slow, median_wait_ns: median_slow,
                        wait_after_blocking_ns: total, holders: holder_shares, **code_evidence(holders, sites) },
            fix: "each blocking call (IO, sleep) gives the GVL away and getting it back costs up to a timeslice " \
                 "while #{culprit ? quote(culprit) : 'another thread'} runs Ruby code: move that CPU-bound work to " \
                 "another process or a Ractor, lower its Thread#priority, or shorten the timeslice " \
                 "(RUBY_THREAD_TIMESLICE, Ruby 3.4+)",
            focus_ns: row.longest_slow_blocking_wait
          )
        end

        # "Its top release sites: `IO#read` at app.rb:12 (2104 ms of waiting after 21), ..." (the
        # waits that followed them); nil without sites.
        def describe_sites(sites)
          shown = sites.first(3).select { |row| row.weight.positive? }
          return if shown.empty?

          "Its top release sites: #{shown.map { |row| "#{row.name} (#{ms(row.weight)} of waiting after #{row.count})" }.join(', ')}"
        end
      end
    end
  end
end
