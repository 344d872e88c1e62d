# frozen_string_literal: true

module GVLScope
  module Analysis
    # The advisor's model for work of several kinds (routes, job classes): one GVL and T threads,
    # simulated request by request. Each thread takes a request of a kind drawn at random by the
    # kinds' shares, waits in line for the GVL (granted in the order asked), holds it for the
    # kind's hold time, then is off it for the kind's idle time (IO), and takes the next request.
    # Hold and idle times are exponential around each kind's means, as in the one-kind model that
    # mean value analysis solves (Advisor.curve), which this equals for one kind
    # (test/analysis/gvl_simulation_test.rb). Several kinds keep what one mean loses: a thread busy with a
    # CPU-only kind brings no IO to overlap, and long and short holds in one line wait longer than
    # holds of their mean length.
    #
    # +exponential: false+ gives every hold and idle exactly its kind's mean instead (the lab's
    # model compares both: research/thread_sweep_model.rb). Seeded: the same kinds give the same numbers. The busy share's spread between seeds is about
    # half a point at the default number of requests (test/analysis/gvl_simulation_test.rb measures it).
    class GVLSimulation
      # One kind of work: share of the requests (0..1), mean GVL hold and mean idle per request (ns).
      Kind = Struct.new(:label, :share, :hold_ns, :idle_ns, keyword_init: true)

      # One thread count's result: busy (the GVL's busy share = throughput x mean hold) and the
      # mean GVL wait per request in ns.
      Result = Struct.new(:threads, :busy, :wait_ns, keyword_init: true)

      REQUESTS = 60_000 # measured per thread count, after WARM_UP more (threads that all started at once settle)
      WARM_UP = 5_000
      SEED = 20_20

      attr_reader :kinds, :mean_hold_ns

      def initialize(kinds, requests: REQUESTS, seed: SEED, exponential: true)
        kinds = kinds.select { |kind| kind.share.positive? }
        raise ArgumentError, "no kind of work with a share" if kinds.empty?

        total = kinds.sum(&:share).to_f
        @kinds = kinds
        @holds = kinds.map { |kind| kind.hold_ns.to_f }
        @idles = kinds.map { |kind| kind.idle_ns.to_f }
        running = 0.0
        @cumulative = kinds.map { |kind| running += kind.share / total }
        @cumulative[-1] = 1.0
        @mean_hold_ns = kinds.sum { |kind| kind.share / total * kind.hold_ns }
        raise ArgumentError, "the GVL holds must be positive" unless @mean_hold_ns.positive?

        @requests = requests
        @seed = seed
        @exponential = exponential
      end

      # The result at +threads+ threads.
      def run(threads)
        random = Random.new(@seed) # the same draws for every count: curves do not zigzag from noise
        io_ends = Array.new(threads, Float::INFINITY) # when each thread's idle ends (INFINITY: not idle)
        kind_of = Array.new(threads)
        asked_at = Array.new(threads, 0.0)
        line = [] # threads waiting for the GVL, in the order they asked
        holder = nil
        hold_ends = Float::INFINITY
        now = 0.0
        done = 0
        measured_from = nil
        held = waited = 0.0
        # Every thread starts a request, asking for the GVL.
        threads.times do |thread|
          kind_of[thread] = draw_kind(random)
          line << thread
        end
        total = WARM_UP + @requests
        while done < total
          if holder.nil? && (holder = line.shift)
            hold = draw(@holds[kind_of[holder]], random)
            hold_ends = now + hold
            if measured_from
              waited += now - asked_at[holder]
              held += hold
            end
          end
          soonest = Float::INFINITY
          thread = nil
          threads.times do |candidate|
            ends = io_ends[candidate]
            if ends < soonest
              soonest = ends
              thread = candidate
            end
          end
          if holder && hold_ends <= soonest
            # The hold ends: the thread goes idle for its kind's idle time (none: the next request).
            now = hold_ends
            finished = holder
            holder = nil
            hold_ends = Float::INFINITY
            idle = @idles[kind_of[finished]]
            if idle.positive?
              io_ends[finished] = now + draw(idle, random)
            else
              done += 1
              next_request(finished, kind_of, asked_at, line, now, random)
            end
          else
            now = soonest
            io_ends[thread] = Float::INFINITY
            done += 1
            next_request(thread, kind_of, asked_at, line, now, random)
          end
          next unless done == WARM_UP && measured_from.nil?

          # Count from here: the part of a hold in progress that is still to come counts too.
          measured_from = now
          held += hold_ends - now if holder
        end
        # A hold in progress at the end counts to its end: leave the part past now out.
        held -= hold_ends - now if holder && hold_ends.finite?
        span = now - measured_from
        Result.new(threads: threads, busy: (held / span).clamp(0.0, 1.0), wait_ns: waited / @requests)
      end

      private

      # A time around +mean+: exponential (inverse transform of a uniform draw), or exactly it.
      def draw(mean, random) = @exponential ? -mean * Math.log(1.0 - random.rand) : mean

      # The first kind whose cumulative share passes the draw: a binary search (the shares only
      # grow), so a request's kind costs log2(kinds) steps, not one per kind (1,000 routes).
      def draw_kind(random)
        pick = random.rand
        @cumulative.bsearch_index { |upto| pick < upto } || (@cumulative.size - 1)
      end

      def next_request(thread, kind_of, asked_at, line, now, random)
        kind_of[thread] = draw_kind(random)
        asked_at[thread] = now
        line << thread
      end
    end
  end
end
