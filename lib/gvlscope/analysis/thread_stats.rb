# frozen_string_literal: true

require_relative "../vocabulary"

module GVLScope
  module Analysis
    # Per-thread totals of a timeline: time in each state, holds, waits, the longest wait and what
    # ended each run (Vocabulary::RELEASE_CAUSES).
    class ThreadStats
      # +created_at+: where the thread was created ("app.rb:12"), when the trace recorded it.
      Row = Struct.new(:serial, :label, :created_at, :ractor_id, :run_ns, :wait_ns, :idle_ns, :gc_ns, :holds, :waits,
                       :longest_wait_ns, :released_by, keyword_init: true)

      attr_reader :rows, :timeline

      def initialize(timeline)
        @timeline = timeline
        @rows = timeline.threads.values.map { |thread| row_for(thread) }
      end

      # Time some thread held the GVL (running or collecting), all Ractors together.
      def held_ns
        rows.sum { |row| row.run_ns + row.gc_ns }
      end

      private

      def row_for(thread)
        totals = Hash.new(0)
        released = Hash.new(0)
        holds = waits = longest = 0
        previous = nil
        thread.intervals.each do |interval|
          totals[interval.state] += interval.duration_ns
          case interval.state
          when :run
            holds += 1 unless previous&.state == :gc # a GC inside a hold splits it, it is still one hold
            released[interval.reason] += 1 if interval.reason
          when :wait
            waits += 1
            longest = interval.duration_ns if interval.duration_ns > longest
          end
          previous = interval
        end
        Row.new(serial: thread.serial, label: thread.label, created_at: thread.info.created_at,
                ractor_id: thread.ractor_id, run_ns: totals[:run],
                wait_ns: totals[:wait], idle_ns: totals[:idle], gc_ns: totals[:gc], holds: holds,
                waits: waits, longest_wait_ns: longest, released_by: released)
      end
    end
  end
end
