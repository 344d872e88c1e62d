# frozen_string_literal: true

module GVLScope
  module Analysis
    # The whole trace at the resolution of a screen: for every thread, the ns it spent in each of
    # run, wait, idle and gc within each of +bins+ equal slices ("bins") of the trace. It is what the
    # HTML report draws zoomed out, and its size depends on threads × bins, not on the trace's
    # length: a 100M-event trace's overview is as small as a 1,000-event one's.
    #
    # lane(serial) is an Array of bins * 4 Integers: bin i's run, wait, idle and gc ns at indexes
    # 4i, 4i + 1, 4i + 2 and 4i + 3 (STATES order, the engine's Engine::LANE_STATES). Time in :started and :exited (a moment each) is
    # not counted, so a bin's four numbers add up to at most bin_ns, less where the thread did not
    # exist. Bin i covers [start_ns + i * bin_ns, start_ns + (i + 1) * bin_ns); the last may reach
    # past the end of the trace.
    #
    # The engine fills the lanes as it reads (Model::Scan#overview_lanes: Overview.new(..., lanes:)).
    class Overview
      STATES = %i[run wait idle gc].freeze
      STATE_INDEX = STATES.each_with_index.to_h.freeze
      BINS = 2000 # a screen's width in pixels, about: the HTML report's default

      attr_reader :bin_ns, :bins, :start_ns

      # +lanes+: serial => Array of bins * 4 Integers, as #lane returns (the engine's numbers).
      def initialize(duration_ns, bins: BINS, lanes: {})
        raise ArgumentError, "bins must be positive, got #{bins}" unless bins.positive?

        @bins = bins
        @bin_ns = [(duration_ns + bins - 1) / bins, 1].max # integer ceil: the bins cover the whole trace
        @start_ns = 0
        @lanes = lanes
      end

      # The serials of the threads with a lane (a thread never seen in any state has none).
      def serials = @lanes.keys

      # Thread +serial+'s bins (all zeros for a thread it has no time for).
      def lane(serial) = @lanes.fetch(serial) { Array.new(@bins * STATES.size, 0) }

      # Several threads' lanes added up, bin by bin: the HTML report's lane of the threads it does
      # not draw one by one.
      def sum(serials)
        total = Array.new(@bins * STATES.size, 0)
        # Columns summed in C (transpose, sum) a hundred lanes at a time: thousands of threads'
        # lanes add up in a fraction of a second, with a bounded copy.
        serials.each_slice(100) do |group|
          [total, *group.map { |serial| lane(serial) }].transpose.each_with_index { |column, index| total[index] = column.sum }
        end
        total
      end
    end
  end
end
