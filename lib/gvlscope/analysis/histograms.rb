# frozen_string_literal: true

require_relative "../units"

module GVLScope
  module Analysis
    # Log2 histograms of a timeline's threads: hold_ns (one hold is run (gc run)* up to a release),
    # wait_ns (each wait for the GVL), and waiters_at_acquire (other threads of the same Ractor
    # still waiting at each acquire, counted by the Timeline).
    module Histograms
      module_function

      def of(threads, waiters_at_acquire)
        holds = Array.new(Log2::BUCKETS, 0)
        waits = Array.new(Log2::BUCKETS, 0)
        threads.each do |thread|
          hold_ns = nil
          thread.intervals.each do |interval|
            case interval.state
            when :run, :gc
              # A GC inside a hold does not end it.
              hold_ns = (hold_ns || 0) + interval.duration_ns
              next
            when :wait
              waits[Log2.bucket(interval.duration_ns)] += 1
            end
            holds[Log2.bucket(hold_ns)] += 1 if hold_ns
            hold_ns = nil
          end
          holds[Log2.bucket(hold_ns)] += 1 if hold_ns
        end
        { hold_ns: holds, wait_ns: waits, waiters_at_acquire: waiters_at_acquire }
      end

      # The same of a Model::Scan's threads with these serials: the engine counted them.
      def of_scan(scan, serials)
        holds, waits = scan.histograms(serials)
        { hold_ns: holds, wait_ns: waits, waiters_at_acquire: scan.waiters_at_acquire }
      end
    end
  end
end
