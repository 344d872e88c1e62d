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
      #
      # A long turn spent mostly off the GVL in a blocking call that did not go through the scheduler
      # (Process.wait, a read of a blocking IO, a C extension's blocking region: the recorder reads
      # the release site of a task's release inside its turn even when no thread waits) is the
      # second kind, :loop_blocking, named by that call: the fix is the scheduler-aware call, or a
      # thread, not faster code. A release under a scheduler hook (its own select) is not one.
      class LoopStall < Rule
        kind :loop_stall, title: "loop stall",
                          legend: "a fiber keeps an event loop for a long turn while other fibers wait for theirs"
        kind :loop_blocking, title: "blocked loop",
                               legend: "a fiber blocks its event loop in a call outside the Fiber scheduler"

        LONG_TURN_NS = Model::Turns::LONG_TURN_NS
        SCHEDULER_HOOK = Model::Turns::SCHEDULER_HOOK # a frame of the Fiber scheduler's hooks

        # A turn is a blocking one when at least this share of it was spent in blocking calls outside the scheduler.
        BLOCKED_SHARE = 0.5
        # Intervals read per long turn (every thread's, in one more pass of the engine).
        INTERVALS_PER_TURN = 10_000

        # The blocking call a turn spent its time in: +site+ its release site (a stack), +blocked_ns+
        # the turn's time off the GVL after such releases, +cause+ the release cause.
        Blocking = Struct.new(:site, :blocked_ns, :cause)

        def findings
          turns = @timeline.respond_to?(:turns) ? @timeline.turns : []
          long = turns.select { |turn| turn.duration_ns >= LONG_TURN_NS && turn.followers.any? }
          blocking = blocking_calls(long)
          blocked, running = long.partition { |turn| blocking.key?(turn) }
          running.group_by { |turn| [turn.thread, code_of(turn)&.first] }
                 .filter_map { |(thread, _code), same| stall(thread, same) } +
            blocked.group_by { |turn| [turn.thread, call_key(blocking[turn].site)] }
                   .filter_map { |(thread, _call), same| blocked_stall(thread, same, blocking) }
        end

        private

        # { turn => Blocking } for the long turns spent mostly in blocking calls outside the
        # scheduler: the loop thread's idle time after a release with a site that has no scheduler
        # hook in it, from the intervals of the turns (one pass for all of them; a trace with stacks).
        def blocking_calls(long)
          return {} if long.empty? || !@timeline.stacks?

          windows = @report.details(long.map { |turn| [turn.start_ns, turn.end_ns] }, limit: INTERVALS_PER_TURN)
          long.zip(windows).each_with_object({}) do |(turn, intervals), found|
            site, blocked_ns = blocked_time(turn, intervals).values.max_by(&:last)
            next unless site && blocked_ns >= BLOCKED_SHARE * turn.duration_ns

            found[turn] = Blocking.new(site, blocked_ns, Vocabulary.release_cause(site))
          end
        end

        # { call_key => [a site of that call, ns] }: the turn's thread idle inside the turn after
        # releasing the GVL outside the scheduler, by call (its stacks may differ deeper down).
        def blocked_time(turn, intervals)
          site = nil
          intervals.select { |interval| interval.thread == turn.thread }.sort_by(&:start_ns)
                   .each_with_object({}) do |interval, calls|
            case interval.state
            when :run then site = interval.site && !through_scheduler?(interval.site) ? interval.site : nil
            when :idle
              next unless site

              call = calls[call_key(site)] ||= [site, 0]
              call[1] += [interval.end_ns, turn.end_ns].min - [interval.start_ns, turn.start_ns].max
              site = nil
            end
          end
        end

        def through_scheduler?(stack) = stack.any? { |frame| frame.label.to_s.match?(SCHEDULER_HOOK) }

        # Releases of one call: its method, and the line of the code that made it.
        def call_key(site)
          code = code_frame(site)
          [site.first&.label, code&.path, code&.line]
        end

        def code_frame(stack) = stack.find { |frame| frame.path && !frame.path.start_with?("<internal:") }

        def blocked_stall(thread, long, blocking)
          waited = long.sum { |turn| turn.duration_ns * turn.followers.size }
          return if waited < @timeslice_ns / 4 # as #stall

          longest = long.max_by(&:duration_ns)
          call = blocking[longest]
          label = @labels.fetch(thread) { Vocabulary.thread_label(nil, thread) }
          code = code_frame(call.site)&.shown
          top = call.site.first&.shown
          others = long.size - 1
          finding(
            kind: :loop_blocking, about: @rows.key?(thread) ? [@rows[thread]] : [], loop_wait: true, explains_wait_ns: waited,
            title: format("Event loop blocked: fiber %d stalled the loop of %s for %s in a blocking call outside the " \
                          "scheduler: %s (a %s turn); %d turn%s of other fibers came right after%s",
                          longest.fiber, quote(label), ms(call.blocked_ns), describe_call(top, code), ms(longest.duration_ns),
                          longest.followers.size, longest.followers.size == 1 ? "" : "s",
                          others.zero? ? "" : format(" (%d more such turn%s, %s blocked in all)", others, others == 1 ? "" : "s",
                                                     ms(long.sum { |turn| blocking[turn].blocked_ns }))),
            evidence: { thread: label, long_turns: long.size, long_turns_ns: long.sum(&:duration_ns),
                        longest_turn_ns: longest.duration_ns, blocked_ns: call.blocked_ns, fiber: longest.fiber,
                        turns_right_after: longest.followers.size, loop_wait_ns: waited, cause: call.cause,
                        call: { label: top&.label, path: code&.path, line: code&.line },
                        **(code ? { code: { label: code.label, path: code.path, line: code.line } } : {}) },
            fix: "the call kept the loop's thread off the GVL without giving the loop back, so no other fiber of " \
                 "the loop ran meanwhile: use the scheduler-aware call (one the Fiber scheduler hooks: IO on a " \
                 "non-blocking IO, `sleep`, Process.wait with a scheduler that has `process_wait`) or move it to a " \
                 "thread (e.g. `Thread.new { ... }.value`, which the scheduler waits for without blocking the loop)",
            focus_ns: [longest.start_ns, longest.end_ns]
          )
        end

        # "`Process.wait` at app.rb:12 in `Object#reap`", as a release site is named (CodeLocations::Row#name).
        def describe_call(top, code)
          return "`#{top&.label}`" unless code

          "`#{top.label}` at #{code.path}:#{code.line} in `#{code.label}`"
        end

        def stall(thread, long)
          waited = long.sum { |turn| turn.followers.sum { |later| turn.kept_waiting_ns(later) } }
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
