# frozen_string_literal: true

require "etc"
require_relative "../errors"

module GVLScope
  module Analysis
    # How many threads a process should run, from measured run / GVL wait / idle shares
    # (`gvlscope advise`; docs/advise.md). The model, stated in every answer:
    #
    #   The GVL is one server. Each request (or job) holds it for D (run + GC, with the holds of
    #   other threads, a Puma reactor's, charged to the requests) and is off it for Z (idle: IO,
    #   sleep, C calls without the GVL). T threads go round: off the GVL for Z, then in line for it
    #   (GVL wait), then D holding it. This is a closed queueing network (the "machine repairman"),
    #   solved exactly by mean value analysis (Reiser & Lavenberg, 1980) with exponential hold and
    #   idle times: the GVL's busy share U(T) (throughput as a share of the most one GVL allows,
    #   1 / D) and the GVL wait per request W(T) for every T.
    #
    #   With no collisions (D and Z never vary), 1 / run share = (D + Z) / D threads keep the GVL
    #   busy. Real holds collide: the advice is the fewest threads whose U(T) reaches TARGET of
    #   the GVL's limit; past it each thread adds about D of GVL wait to every request and almost
    #   no throughput. --max-wait-ms lowers it to the most threads whose W(T) stays under a budget.
    #
    # Where cores are free (cores > processes) and the process's GVL would be busy, more processes
    # (one GVL each) add throughput that more threads cannot.
    class Advisor
      TARGET = 0.95 # the lab's knee uses the same 95 % of the best throughput (docs/lab.md)
      MAX_THREADS = 64
      # Idle reasons (Vocabulary::IDLE_REASONS) that are a request's own IO: a thread blocked on a
      # lock, a queue or a join is waiting for work or for another thread, and more threads do not
      # shorten that (a thread pool's idle workers wait on a ConditionVariable).
      WORK_IDLE_REASONS = %i[io sleep io_sleep blocking].freeze

      # What the advice is computed from: the shares of one unit of work. +unit+: :request or :job
      # when a snapshot had per-request/per-job numbers (Breakdown entries; +count+ of them), else
      # :thread (the worker threads' time added together). Times in ns, summed over the unit.
      #   run_ns, gc_ns, wait_ns, idle_ns: as everywhere (Vocabulary::STATES)
      #   excluded_idle_ns: idle on a lock / queue / join (per thread, from a trace): not counted
      #   other_held_ns:   GVL held by threads outside the pool in the same window
      #   threads:         the pool's size now (T0); pool: its name ("puma srv tp", 5 threads)
      #   held_ratio:      share of the window the GVL was held (all threads)
      Workload = Struct.new(:source, :unit, :count, :run_ns, :gc_ns, :wait_ns, :idle_ns, :excluded_idle_ns,
                            :other_held_ns, :pool_held_ns, :threads, :pool, :held_ratio, :window_ns, :notes,
                            keyword_init: true) do
        def held_ns = run_ns + gc_ns
        def own_ns = run_ns + gc_ns + idle_ns
        def total_ns = run_ns + gc_ns + wait_ns + idle_ns

        # Share of the unit's time in each state (wait included), as shown.
        def shares
          total = total_ns.to_f
          return { run: 0.0, wait: 0.0, idle: 0.0, gc: 0.0 } unless total.positive?

          { run: run_ns / total, wait: wait_ns / total, idle: idle_ns / total, gc: gc_ns / total }
        end

        # Other threads' GVL holds charged to the pool's work: total held / the pool's held.
        def charge
          pool = (pool_held_ns || held_ns).to_f
          pool.positive? ? (pool + other_held_ns.to_i) / pool : 1.0
        end
      end

      # One row of the model's curve.
      Point = Struct.new(:threads, :busy, :wait_per_demand, keyword_init: true)

      Advice = Struct.new(:workload, :threads, :processes, :cores, :current_processes, :no_collision_threads,
                          :demand_ns, :idle_per_request_ns, :run_share, :curve, :target, :max_wait_ns,
                          :limited_by, :measured_busy, :what_would_change, keyword_init: true) do
        def point(threads) = curve[threads - 1]
        def per_request? = workload.count.to_i.positive?
      end

      # Mean value analysis of the closed network: one queue (the GVL, demand +d+ per request) and
      # one delay (idle, +z+ per request) with +max+ threads. Returns Points for 1..max: busy = U(T)
      # (= throughput x d), wait_per_demand = W(T) / d.
      def self.curve(d, z, max = MAX_THREADS)
        raise ArgumentError, "GVL demand must be positive" unless d.positive?

        queue = 0.0
        (1..max).map do |threads|
          response = d * (1 + queue) # an arriving request finds, on average, the queue of T-1 threads
          throughput = threads / (response + z)
          queue = throughput * response
          Point.new(threads: threads, busy: throughput * d, wait_per_demand: (response - d) / d)
        end
      end

      attr_reader :workload

      # +cores+: CPU cores the processes share (default: this machine's); +processes+: how many
      # run this workload now; +max_wait_ms+: the GVL wait per request you accept (needs
      # per-request numbers); +max_threads+: the most threads considered.
      def initialize(workload, cores: nil, processes: 1, max_wait_ms: nil, max_threads: MAX_THREADS, target: TARGET)
        @workload = workload
        @cores = cores || Etc.nprocessors
        @processes = processes
        @max_wait_ms = max_wait_ms
        @max_threads = max_threads
        @target = target
        validate!
      end

      def advice
        @advice ||= build
      end

      private

      def validate!
        raise Error, "--cores must be at least 1 (got #{@cores})" unless @cores.is_a?(Integer) && @cores >= 1
        raise Error, "--processes must be at least 1 (got #{@processes})" unless @processes.is_a?(Integer) && @processes >= 1
        unless @max_threads.is_a?(Integer) && @max_threads.between?(1, 1024)
          raise Error, "--max-threads must be 1..1024 (got #{@max_threads})"
        end
        raise Error, "--max-wait-ms must be a number > 0 (got #{@max_wait_ms})" if @max_wait_ms && !@max_wait_ms.positive?
        if @max_wait_ms && !@workload.count.to_i.positive?
          raise Error, "--max-wait-ms needs per-request numbers (a snapshot with Breakdown entries); " \
                       "#{@workload.source} has per-thread numbers only"
        end
        return if @workload.held_ns.positive?

        raise Error, "#{@workload.source}: the worker threads (#{@workload.pool}) never held the GVL: nothing to advise from " \
                     "(measure under load, or choose the threads with --threads)"
      end

      def build
        w = @workload
        per = w.count.to_i.positive? ? w.count.to_f : 1.0
        demand = w.held_ns * w.charge / per
        idle = w.idle_ns / per
        curve = Advisor.curve(demand, idle, @max_threads)
        best = curve.map(&:busy).max
        threads = curve.find { |p| p.busy >= @target * best }.threads
        limited_by = :throughput
        max_wait_ns = @max_wait_ms && @max_wait_ms * 1e6
        if max_wait_ns
          within = curve.select { |p| p.wait_per_demand * demand <= max_wait_ns }.map(&:threads).max || 1
          if within < threads
            threads = within
            limited_by = :wait
          end
        end
        Advice.new(workload: w, threads: threads, processes: processes_for(curve[threads - 1]), cores: @cores,
                   current_processes: @processes, no_collision_threads: (demand + idle) / demand, demand_ns: demand,
                   idle_per_request_ns: idle, run_share: demand / (demand + idle), curve: curve, target: @target,
                   max_wait_ns: max_wait_ns, limited_by: limited_by, measured_busy: w.held_ratio,
                   what_would_change: what_would_change(demand, idle, threads))
      end

      # One process per core while the GVL would be busy: a GVL busy U of the time keeps U of a
      # core busy, so cores / U processes fill the cores (never fewer than now, at most one per core
      # when U is high).
      def processes_for(point)
        return @processes if @cores <= @processes

        [[(@cores / [point.busy, 0.05].max).floor, @cores].min, @processes].max
      end

      # The recommendation again with the idle per request halved and doubled: how much the answer
      # hangs on the IO share.
      def what_would_change(demand, idle, threads)
        {
          idle_halved: threads_for(demand, idle / 2.0),
          idle_doubled: threads_for(demand, idle * 2.0),
          current: threads,
        }
      end

      def threads_for(demand, idle)
        curve = Advisor.curve(demand, idle, @max_threads)
        best = curve.map(&:busy).max
        curve.find { |p| p.busy >= @target * best }.threads
      end
    end
  end
end
