# frozen_string_literal: true

require_relative "../support/vocabulary"

module GVLScope
  module Model
    # A thread's state from +start_ns+ to +end_ns+, in the words of Vocabulary (states, idle
    # reasons, release causes): what Scan#details, Scan#intervals_of and the HTML report hand out.
    #
    # +reason+ says why: for :idle, the idle reason (Vocabulary::IDLE_REASONS); for :run, the
    # release cause that ended it (Vocabulary::RELEASE_CAUSES). A :run interval that ended with a
    # release recorded with its site has +site+: the thread's stack at SUSPENDED (a frozen Array
    # of Model::Frame, innermost first), from which the cause is told.
    Interval = Struct.new(:thread, :state, :start_ns, :end_ns, :reason, :native, :site) do
      def duration_ns = end_ns - start_ns
    end

    # Intervals as columns, Arrays of one length in time order (by start): each interval's thread
    # serial, state, reason (as Interval's), start and end. The HTML report's windows (up to its
    # whole budget of intervals) in this form cost no object per interval. Scan#details_columns
    # makes them from the engine; .of from Intervals.
    IntervalColumns = Struct.new(:serials, :states, :reasons, :starts, :ends) do
      def self.of(intervals)
        new(intervals.map(&:thread), intervals.map(&:state), intervals.map(&:reason), intervals.map(&:start_ns),
            intervals.map(&:end_ns))
      end

      def size = starts.size

      # The intervals at +indexes+ (a Range, or an Array in the order wanted).
      def pick(indexes)
        return self.class.new(*to_a.map { |column| column[indexes] || [] }) if indexes.is_a?(Range)

        self.class.new(*to_a.map { |column| indexes.map { |index| column[index] } })
      end

      # The index of the first interval that starts at or after +time_ns+ (size if none).
      def first_starting_at(time_ns) = starts.bsearch_index { |start| start >= time_ns } || size
    end

    # A thread of a trace: its serial, its ThreadInfo, and its intervals (Scan: collected by a
    # pass of their own, on first use).
    ThreadTimeline = Struct.new(:serial, :info, :intervals) do
      def label = info.label
      def display_name = Vocabulary.thread_display_name(info.label, info.created_at)
      def ractor_id = info.ractor_id
    end
  end
end
