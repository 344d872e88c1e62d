# frozen_string_literal: true

module GVLScope
  module Model
    # An event loop's turn (docs/fibers.md): the loop of thread +thread+ (a serial) gave the
    # thread to the task fiber +fiber+ (its serial in the trace; 0 when the recorder had none for
    # it) from +start_ns+ to +end_ns+ (the trace's end if it was still running: +open+ is then
    # true). +site+: where the fiber gave the loop back, a stack (Frame array), for a turn of
    # 10 ms or more in a trace with stacks, read when that fiber next got a turn (none if it did
    # not: it ended). +followers+: the turns of other fibers that began right after it on the
    # same loop (Turns.follow): those it most likely kept waiting. +ready_ns+: when its fiber
    # became ready (its wait in the scheduler ended), when the trace tells (format 5), else nil.
    Turn = Struct.new(:thread, :fiber, :start_ns, :end_ns, :open, :site, :followers, :ready_ns) do
      def duration_ns = end_ns - start_ns

      # How long this turn kept +later+'s fiber waiting: from when it was ready (the whole turn
      # when not known) to this turn's end.
      def kept_waiting_ns(later) = end_ns - (later.ready_ns ? later.ready_ns.clamp(start_ns, end_ns) : start_ns)

      # The task's own frame where it gave the loop back (Frame#shown), or nil without a site:
      # below the scheduler's hook, the first in a source file (a C method as Kernel#sleep is the
      # call, not the code).
      def given_back_at
        stack = site or return nil
        hook = stack.rindex { |frame| frame.label.to_s.match?(Turns::SCHEDULER_HOOK) }
        callers = hook ? stack.drop(hook + 1) : stack
        frame = callers.find { |f| f.path && !f.path.start_with?("<internal:") } || callers.first
        frame&.shown
      end

      # given_back_at as the exports name a frame in a string: "Object#render_report (loop.rb:13)".
      def given_back_label
        frame = given_back_at or return nil
        frame.path ? "#{frame.label} (#{frame.path}:#{frame.line})" : frame.label
      end
    end

    # Turns from a trace's turn records (format version 4; TURN_READY, version 5).
    module Turns
      module_function

      # The turns that began right after one (each within this of the previous turn's end) are the
      # fibers the loop resumed next without waiting for anything in between: an idle select
      # that waited for IO or a timer takes longer, so the chain ends there. Of those, a fiber
      # the trace says became ready after the turn ended (TURN_READY) was not kept waiting by it;
      # one whose readiness is not recorded (a wait the scheduler does not tell: a pipe) is
      # taken as waiting.
      BACK_TO_BACK_NS = 1_000_000
      # ext/gvlscope/format.h's GVLS_LONG_TURN_NS: a turn this long has its site recorded.
      LONG_TURN_NS = 10_000_000
      # The scheduler hooks a task gives the loop back from (Fiber::Scheduler's interface): the
      # frames above them are the scheduler's, the one below names the task's code.
      SCHEDULER_HOOKS = %w[kernel_sleep io_wait io_read io_write io_pread io_pwrite io_select block process_wait
                           address_resolve timeout_after blocking_operation_wait].freeze
      SCHEDULER_HOOK = /#(?:#{SCHEDULER_HOOKS.join('|')})\z/

      # +records+: [[time_ns, thread, kind, value], ...] in time order (the tests' TraceFile#raw_turns, or
      # the rows of the engine's Index#turns, Engine::TurnColumns); +stack+: id -> stack (nil if
      # unknown); +end_ns+: the trace's end. Returns the turns, in order of their start; followers only for the long ones
      # (LONG_TURN_NS: the ones a finding tells of).
      def build(records, end_ns:, stack: ->(_id) {})
        turns = []
        open = {}  # thread -> its turn in progress
        last = {}  # [thread, fiber] -> its last ended turn
        records.each do |time, thread, kind, value|
          case kind
          when :turn_begin
            open[thread] = Turn.new(thread, value, time, nil, false, nil, [])
            turns << open[thread]
          when :turn_end
            turn = open.delete(thread) or next # a turn begun before the trace is not one of its turns
            turn.end_ns = time
            last[[thread, turn.fiber]] = turn
          when :turn_ready
            turn = open[thread]
            turn.ready_ns = turn.start_ns - value * 1000 if turn
          when :turn_site
            fiber = open[thread]&.fiber
            previous = last[[thread, fiber]] if fiber
            previous.site = stack.call(value) if previous
          end
        end
        open.each_value do |turn|
          turn.end_ns = [end_ns, turn.start_ns].max
          turn.open = true
        end
        follow(turns)
      end

      # Sets each long turn's followers: per loop, the turns after it that began back to back.
      def follow(turns)
        turns.group_by(&:thread).each_value do |loop_turns|
          loop_turns.each_with_index do |turn, i|
            next if turn.duration_ns < LONG_TURN_NS

            previous_end = turn.end_ns
            seen = { turn.fiber => true }
            loop_turns.drop(i + 1).each do |later|
              kept = later.ready_ns ? later.ready_ns < turn.end_ns : nil # told: ready during the long turn
              # An idle select (it waited for IO or a timer: a gap), unless the trace says the next
              # fiber had been ready since the long turn (the OS kept the thread off a CPU), or a
              # fiber's second turn (the loop went around: what ran after it was not waiting for
              # the long turn), ends the chain.
              break if (later.start_ns - previous_end > BACK_TO_BACK_NS && !kept) || seen[later.fiber]

              seen[later.fiber] = true
              turn.followers << later unless kept == false
              previous_end = later.end_ns
            end
          end
        end
        turns
      end
    end
  end
end
