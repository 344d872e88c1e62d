# frozen_string_literal: true

require_relative "../support/units"

module GVLScope
  module Analysis
    # Log2 histograms of a trace's threads: hold_ns (one hold is run (gc run)* up to a release),
    # wait_ns (each wait for the GVL), and waiters_at_acquire (other threads of the same Ractor
    # still waiting at each acquire), as the engine counted them.
    module Histograms
      module_function

      # Of a Model::Scan's threads with these serials (all when nil): the engine counted them.
      def of(scan, serials = nil)
        counted = scan.histograms(serials) # Engine::Histograms
        { hold_ns: counted.hold_ns, wait_ns: counted.wait_ns, waiters_at_acquire: scan.waiters_at_acquire }
      end
    end
  end
end
