# frozen_string_literal: true

require_relative "../rule"
require_relative "../../model/turns"

module GVLScope
  module Analysis
    module Rules
      # Event loop stalled: on a thread with a Fiber scheduler (Falcon, async), one fiber kept the
      # loop for a long turn (Model::Turn, LONG_TURN_NS or more; a trace with turns: format 4),
      # and other fibers' turns came right after it: they were ready and waited for it, as threads
      # wait for a GVL holder, though no thread waited for the GVL. Readiness is not recorded: the
      # wait it explains is each long turn's length once per other fiber that came right after
      # (Model::Turns.follow), an upper bound (a fiber whose IO came late in the turn waited less).
      # One finding per loop and code: a long turn's code is where it spent its time when holder
      # samples caught it (the GVL's sampler while another thread waits, the trace's drain thread's
      # every 100 ms into a long turn), else where its fiber gave the loop back (TURN_SITE: the
      # caller of the scheduler's hook it was in). A server's loop stalls for its app's boot once
      # and for a CPU-bound route at each request: each has its finding, ranked by the wait it explains.
      class LoopStall < Rule
        LONG_TURN_NS = Model::Turns::LONG_TURN_NS

        def findings
          turns = @timeline.respond_to?(:turns) ? @timeline.turns : []
          long = turns.select { |turn| turn.duration_ns >= LONG_TURN_NS && turn.followers.any? }
          long.group_by { |turn| [turn.thread, code_of(turn)&.first] }
              .filter_map { |(thread, _code), same| stall(thread, same) }
        end

        private

        def stall(thread, long)
          waited = long.sum { |turn| turn.duration_ns * turn.followers.size }
          # A quarter timeslice, as a GC stall: a healthy loop's odd 10 ms turn is no finding.
          return if waited < @timeslice_ns / 4

          longest = long.max_by(&:duration_ns)
          label = @labels.fetch(thread) { Vocabulary.thread_label(nil, thread) }
          code, code_from = code_of(longest)
          others = long.size - 1
          finding(
            kind: :loop_stall, about: @rows.key?(thread) ? [@rows[thread]] : [], loop_wait: true, explains_wait_ns: waited,
            title: format("Event loop stalled: a fiber kept the loop of %s for %s (its code: %s); %d turn%s of other fibers " \
                          "came right after%s",
                          quote(label), ms(longest.duration_ns), code ? describe(code) : unknown_code(longest),
                          longest.followers.size, longest.followers.size == 1 ? "" : "s",
                          others.zero? ? "" : format(" (%d more such turn%s, %s in all)", others, others == 1 ? "" : "s",
                                                     ms(long.sum(&:duration_ns)))),
            evidence: { thread: label, long_turns: long.size, long_turns_ns: long.sum(&:duration_ns),
                        longest_turn_ns: longest.duration_ns, fiber: longest.fiber,
                        turns_right_after: longest.followers.size, loop_wait_ns: waited,
                        **(code ? { code: { label: code.label, path: code.path, line: code.line }, code_from: code_from } : {}) },
            fix: "while a fiber runs, every other fiber of its loop waits, whatever its IO: make that code faster, give " \
                 "the loop back between its parts (`sleep 0` yields to the loop), or run it off the loop (a thread, a " \
                 "background job) so the loop's other requests do not queue behind it",
            focus_ns: [longest.start_ns, longest.end_ns]
          )
        end

        # [frame, :samples or :give_back], or nil.
        def code_of(turn)
          (@code_of ||= {})[turn] ||= begin
            sampled = sampled_code(turn)
            given_back = !sampled && turn.given_back_at
            sampled ? [sampled, :samples] : given_back && [given_back, :give_back]
          end
        end

        # The code most of the loop thread's holder samples during the turn were in (the first frame
        # in a source file, as CodeLocations names holders' code).
        def sampled_code(turn)
          samples = samples_of(turn.thread)
          from = samples.bsearch_index { |sample| sample.time_ns >= turn.start_ns } or return nil
          frames = samples[from..].take_while { |sample| sample.time_ns <= turn.end_ns }.filter_map do |sample|
            sample.stack&.find { |frame| frame.path && !frame.path.start_with?("<internal:") }
          end
          frames.tally.max_by(&:last)&.first&.shown
        end

        # The thread's holder samples, those taken while others waited and those no one waited for, in time order.
        def samples_of(thread)
          @samples_of ||= begin
            stacked = @timeline.stacks? && @timeline.respond_to?(:samples)
            lone = stacked && @timeline.respond_to?(:lone_samples) ? @timeline.lone_samples : []
            (stacked ? @timeline.samples + lone : []).group_by(&:thread).transform_values { |list| list.sort_by(&:time_ns) }
          end
          @samples_of.fetch(thread, [])
        end

        # As CodeLocations::Row#name: "`Object#spin` (app.rb:6)".
        def describe(frame) = frame.path ? "`#{frame.label}` (#{frame.path}:#{frame.line})" : "`#{frame.label}`"

        def unknown_code(turn)
          return "not recorded: a trace without stacks" unless @timeline.stacks?
          return "unknown: the trace ended during it" if turn.open

          "unknown: the fiber ended in it"
        end
      end
    end
  end
end
