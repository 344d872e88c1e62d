# frozen_string_literal: true

module GVLScope
  module Exporters
    # What every exporter shares: it reads one Timeline and writes to an IO (or String) in
    # buffered pieces of FLUSH_BYTES, so huge traces neither build one giant String nor pay a
    # method call per tiny write.
    class Exporter
      FLUSH_BYTES = 1 << 20

      def initialize(timeline)
        @timeline = timeline
      end
    end
  end
end
