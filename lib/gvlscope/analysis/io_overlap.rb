# frozen_string_literal: true

module GVLScope
  module Analysis
    # A thread's GVL wait that IO it had started overlapped, from its intervals in order, by the
    # hook's rule (ext/gvlscope/metrics_event.h): the waits after releases that returned at once
    # (a write), counted when a release that blocked (its read) follows without a hold of
    # OVERLAP_HOLD_NS or more in between. ext/gvlscope_engine/pass.c (io_overlap_add) counts the same.
    class IOOverlap
      # The hook's bounds (Native has them too, test/analysis/advise_test.rb checks they agree): a release
      # shorter than QUICK_RELEASE_NS returned at once; a hold of OVERLAP_HOLD_NS or more is other work.
      QUICK_RELEASE_NS = 1_000_000
      OVERLAP_HOLD_NS = 1_000_000

      def self.wait_ns(intervals)
        overlap = new
        intervals.each { |interval| overlap.add(interval.state, interval.duration_ns) }
        overlap.counted
      end

      attr_reader :counted

      def initialize
        @counted = @pending = @hold = 0
        @woke_at_once = false
        @previous = nil
      end

      def add(state, duration_ns)
        case state
        when :run, :gc then @hold += duration_ns
        when :idle
          @pending = 0 if @hold >= OVERLAP_HOLD_NS
          @hold = 0
          @woke_at_once = duration_ns < QUICK_RELEASE_NS
          unless @woke_at_once
            @counted += @pending
            @pending = 0
          end
        when :wait
          if @previous == :idle # after a blocking release (one that returned at once, or not)
            @pending += duration_ns if @woke_at_once
          else # a preemption: the hold ended at its SUSPENDED (a timeslice: other work)
            @pending = 0 if @hold >= OVERLAP_HOLD_NS
            @woke_at_once = false
          end
          @hold = 0
        end
        @previous = state
      end
    end
  end
end
