# frozen_string_literal: true

require "etc"
require_relative "../support/errors"
require_relative "../support/units"
require_relative "../support/counters"
require_relative "gvl_simulation"

module GVLScope
  module Analysis
    # How many threads a process should run, from measured run / GVL wait / idle shares
    # (`gvlscope advise`; docs/advise.md). The model, stated in every answer:
    #
    #   The GVL is one server. Each request (or job) holds it for D (run + GC, with the holds of
    #   other threads, a Puma reactor's, charged to the requests) and is off it for Z (idle: IO,
    #   sleep, C calls without the GVL; not the time a thread back from IO waited for a CPU core,
    #   where Linux tells it: more threads lengthen that wait, they cannot overlap it). T threads go round: off the GVL for Z, then in line for it
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
    # A busy GVL runs Ruby on one core at a time: where cores are free (cores > processes), more
    # processes (one GVL each) add throughput that more threads cannot; the advice is one per core.
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
      #   processes:       how many processes the numbers are of, when the source says (a scrape's workers)
      #   pool_labels:     the pool's thread labels
      #   cpu_wait_ns:     the pool's time runnable but waiting for a CPU core (Linux, a live pid), or nil
      #   cpu_ns:          the pool's time on a CPU core in the same window (Linux, a live pid), or nil
      #   io_overlap_wait_ns: the pool's GVL wait that IO it had started overlapped (a write returned
      #                    at once, the thread waited for the GVL back, its read then blocked), or nil
      #   kinds:           the units by kind (routes, job classes: WorkKind, summed like the unit's
      #                    numbers) when there are two or more; the model then keeps them apart
      #   hog:             a thread that held the GVL most of the time (Hog), or nil
      Workload = Struct.new(:source, :unit, :count, :run_ns, :gc_ns, :wait_ns, :idle_ns, :excluded_idle_ns,
                            :other_held_ns, :pool_held_ns, :threads, :pool, :held_ratio, :window_ns, :notes,
                            :processes, :pool_labels, :cpu_wait_ns, :cpu_ns, :io_overlap_wait_ns, :kinds, :hog,
                            keyword_init: true) do
        include Counters::Sums # held_ns, total_ns

        # Share of the unit's time in each state (wait included), as shown.
        def shares
          total = total_ns.to_f
          return { run: 0.0, wait: 0.0, idle: 0.0, gc: 0.0 } unless total.positive?

          { run: run_ns / total, wait: wait_ns / total, idle: idle_ns / total, gc: gc_ns / total }
        end

        # The pool's run-queue wait that fell inside its GVL holds: at least held - CPU time (a holder
        # is on a core or set aside by the kernel), at most the whole wait; 0 without the CPU time.
        def held_cpu_wait_ns
          return 0 unless cpu_wait_ns && cpu_ns

          ((pool_held_ns || held_ns) - cpu_ns).clamp(0, cpu_wait_ns)
        end

        # The pool's run-queue wait outside its GVL holds: threads back from IO (or woken) waiting for
        # a core. It is not IO: more threads lengthen it, they cannot overlap it (0 without the wait).
        def runqueue_idle_ns
          return 0 unless cpu_wait_ns

          [cpu_wait_ns - held_cpu_wait_ns, idle_ns.to_i].min
        end

        # Other threads' GVL holds charged to the pool's work: total held / the pool's held.
        def charge
          pool = (pool_held_ns || held_ns).to_f
          pool.positive? ? (pool + other_held_ns.to_i) / pool : 1.0
        end
      end

      # A thread that held the GVL +share+ of the time (AdvisorInputs::HOG_SHARE or more; +held_ns+)
      # while the pool worked, in +code+ when the input says where (or nil); +in_pool+ when it is one
      # of the pool's. Every other thread waits up to a timeslice per turn behind it, at any count:
      # the answer says so before the count.
      Hog = Struct.new(:label, :held_ns, :share, :code, :in_pool, keyword_init: true) do
        # "'pricer' held the GVL 99.9 % of the time, in `Pricer#spin` (pricer.rb:8)"
        def to_s = "'#{label}' held the GVL #{format('%.1f %%', 100 * share)} of the time#{", in #{code}" if code}"
      end

      # One kind of unit (a route, a job class): how many, and their times summed (ns);
      # io_overlap_wait_ns: theirs, or nil where the source does not count it per unit.
      WorkKind = Struct.new(:label, :count, :run_ns, :gc_ns, :wait_ns, :idle_ns, :io_overlap_wait_ns, keyword_init: true) do
        include Counters::Sums
      end

      # What the model is given for one kind (per unit, ns): its share of the units, its GVL hold D
      # and idle Z, and the parts of Z measured as such: +cpu_wait+ (the run-queue wait left out)
      # and +overlap+ (the GVL wait that was IO, put in).
      ModelKind = Struct.new(:label, :share, :demand, :measured_idle, :cpu_wait, :overlap, keyword_init: true) do
        def idle = measured_idle - cpu_wait
      end

      # One row of the model's curve.
      Point = Struct.new(:threads, :busy, :wait_per_demand, keyword_init: true)

      Advice = Struct.new(:workload, :threads, :processes, :cores, :current_processes, :no_collision_threads,
                          :demand_ns, :idle_per_request_ns, :run_share, :curve, :target, :max_wait_ns,
                          :limited_by, :sensitivity, :kinds, :max_threads, keyword_init: true) do
        def point(threads) = curve[threads - 1]
        def per_request? = workload.count.to_i.positive?
        def unit_name = per_request? ? workload.unit.to_s : "thread"
        def current_threads = workload.threads

        # The model's point at the current thread count, when the curve reaches it.
        def current_point = current_threads.between?(1, curve.size) ? point(current_threads) : nil

        # The GVL wait per unit the model predicts at +threads+, in ns (per request) or nil.
        def wait_ns_at(threads) = per_request? ? point(threads).wait_per_demand * demand_ns : nil

        # Why no thread count helps while workload.hog holds the GVL (nil without one): text and
        # JSON say the same.
        def hog_reason
          hog = workload.hog or return nil
          "#{hog.in_pool ? "It is one of the pool's threads" : "It is not one of the pool's threads"}: while it " \
            "runs Ruby code, every other thread waits " \
            "for it up to a timeslice per turn, however many threads the pool has; more threads only add " \
            "waiting, fewer do not shorten it. Move that work to a Ractor or another process, or lower its " \
            "Thread#priority (if it feeds a Queue, bound it with a SizedQueue), then measure again."
        end

        # Why this many threads, in sentences (text and JSON show the same).
        def reasoning
          pct = ->(share) { format("%.0f %%", 100 * share) }
          chosen = point(threads)
          idle_note = if workload.runqueue_idle_ns.positive?
                        " Idle leaves out the #{format('%.1f %%', 100.0 * workload.runqueue_idle_ns / workload.total_ns)} of " \
                          "the time the pool's threads waited for a CPU core outside their holds: more threads lengthen that " \
                          "wait, they cannot overlap it."
                      end
          if workload.io_overlap_wait_ns.to_i.positive?
            idle_note = "#{idle_note} Idle includes the #{format('%.1f %%', 100.0 * workload.io_overlap_wait_ns / workload.total_ns)} " \
                        "of the time the pool waited for the GVL while IO it had started was on its way (a call that " \
                        "returned at once, then a wait, then one that blocked): without the wait that was IO."
          end
          lines = ["Run share = (run + GC) / (run + GC + idle) = #{format('%.3f', run_share)} (GVL wait left out: it is " \
                   "what threads add).#{idle_note} With no collisions, (D + Z) / D = 1 / run share = " \
                   "#{format('%.1f', no_collision_threads)}: that many threads keep the GVL busy, each idle while the others hold it."]
          if kinds
            described = kinds.map do |kind|
              "#{kind.label} #{pct.(kind.share)}: D #{Units.ms(kind.demand)}, Z #{Units.ms(kind.idle)}"
            end
            lines << "#{kinds.size} kinds of #{unit_name} kept apart (#{described.join('; ')}): one mean #{unit_name} " \
                     "hides that a thread busy with a kind that does little IO overlaps none, so the model simulates " \
                     "them #{unit_name} by #{unit_name}. As one mean #{unit_name} the answer would be " \
                     "#{Advisor.count(sensitivity[:one_kind], 'thread')}."
          end
          unless limited_by == :max_threads
            lines << "Holds collide, so the model counts them: #{threads} thread#{'s' unless threads == 1} " \
                     "#{threads == 1 ? 'keeps' : 'keep'} the GVL busy #{pct.(chosen.busy)} of the time, " \
                     "the fewest to reach #{pct.(target)} of what one GVL allows."
          end
          if limited_by == :max_threads
            lines << "That many threads are past --max-threads #{max_threads}: #{Advisor.count(threads, 'thread')} keep the GVL busy " \
                     "#{pct.(chosen.busy)}; the rest is IO that more processes can overlap as well as more threads."
          elsif limited_by == :wait
            lines << "Lowered to #{threads} by --max-wait-ms #{format('%g', max_wait_ns / 1e6)}: one more thread would " \
                     "raise the GVL wait per #{unit_name} to #{Units.ms(wait_ns_at(threads + 1))}."
          elsif threads < curve.size
            extra = point(threads + 1)
            wait_added = (extra.wait_per_demand - chosen.wait_per_demand)
            wait_text = per_request? ? Units.ms(wait_added * demand_ns) : "#{format('%.1f', wait_added)} x the run time"
            lines << "Going to #{threads + 1} threads would add #{format('%.1f', 100 * (extra.busy - chosen.busy))} points of " \
                     "GVL busy time (throughput) and #{wait_text} of GVL wait per #{unit_name}."
          end
          if (now = current_point)
            check = "At the current #{current_threads} thread#{'s' unless current_threads == 1} the model predicts the GVL " \
                    "busy #{pct.(now.busy)}"
            check += "; measured #{pct.(workload.held_ratio)} (all threads)" if workload.held_ratio
            lines << "#{check}."
          end
          lines
        end

        def processes_reasoning
          if cores > current_processes
            "#{cores} cores, #{current_processes} process#{'es' unless current_processes == 1}: one process's GVL runs " \
              "Ruby on one core at a time (busy #{format('%.0f %%', 100 * point(threads).busy)} at #{Advisor.count(threads, 'thread')}); " \
              "#{processes} processes (one GVL each) use the free cores, which more threads in one process cannot."
          else
            "#{cores} core#{'s' unless cores == 1}, #{current_processes} process#{'es' unless current_processes == 1}: " \
              "no core is free for another process; keep #{current_processes}, each with #{Advisor.count(threads, 'thread')}."
          end
        end

        # What would change the answer, in sentences.
        def what_would_change
          lines = ["Slower IO: with twice the idle time per #{unit_name} the answer is " \
                   "#{Advisor.count(sensitivity[:idle_doubled], 'thread')}; with half, #{sensitivity[:idle_halved]}. Faster Ruby (less run time) moves it like more idle."]
          lines << if kinds
                     "Steadier requests: the model takes each kind's hold and idle times as varied as exponential " \
                       "times; with each kind's times exact (the kinds still mixed at random), " \
                       "#{Advisor.count(sensitivity[:exact_times], 'thread')} would do."
                   else
                     "Steadier requests: the model takes hold and idle times as varied as exponential times; " \
                       "with no variation at all, #{Advisor.count(no_collision_threads.ceil, 'thread')} would do."
                   end
          if workload.unit == :thread
            lines << "Idle time between requests: these are per-thread numbers, so a thread that waited for work " \
                     "counts as doing IO and the answer comes out higher. Measure under load#{workload.excluded_idle_ns.to_i.positive? ? ' (a trace leaves out idle on locks, queues and joins: that is how thread pools wait for work)' : ''}, " \
                     "or give per-request numbers (a snapshot with Breakdown entries)."
          end
          as_idle = if sensitivity[:runqueue_as_idle]
                      " Counted as IO, that wait would make the answer #{Advisor.count(sensitivity[:runqueue_as_idle], 'thread')}."
                    end
          if sensitivity[:without_io_overlap]
            lines << "IO hidden in GVL wait: counted as wait, the IO in flight while the pool waited for the GVL would make " \
                     "the answer #{Advisor.count(sensitivity[:without_io_overlap], 'thread')}."
          end
          lines << if sensitivity[:without_cpu_wait] && workload.cpu_ns
                     "A machine short of CPU: the pool waited for a core #{format('%.1f %%', 100.0 * workload.cpu_wait_ns / workload.total_ns)} " \
                       "of its time (Linux's run-queue wait); #{format('%.1f %%', 100.0 * workload.held_cpu_wait_ns / workload.total_ns)} " \
                       "of it inside its GVL holds (run beyond its CPU time), counted as run; the rest is left out of idle " \
                       "(back from IO, every core busy: not IO that threads overlap).#{as_idle} With a core free whenever a " \
                       "thread can run, the answer would be #{Advisor.count(sensitivity[:without_cpu_wait], 'thread')}."
                   elsif sensitivity[:without_cpu_wait]
                     "A machine short of CPU: the pool waited for a core #{format('%.1f %%', 100.0 * workload.cpu_wait_ns / workload.total_ns)} " \
                       "of its time (Linux's run-queue wait), left out of idle (back from IO, every core busy: not IO that " \
                       "threads overlap; without the pool's CPU time none of it is known to be inside its holds).#{as_idle}"
                   else
                     "A machine short of CPU: a thread back from IO that waits for a core counts as idle here, " \
                       "so the answer comes out high (Linux shows that wait in /proc/PID/task/TID/schedstat)."
                   end
          if workload.held_ratio && workload.held_ratio < 0.5
            lines << "Load: the GVL was busy only #{format('%.0f %%', 100 * workload.held_ratio)} of the time measured: " \
                     "the counts are what the process needs when busy, not at this load."
          end
          lines << "A latency budget: --max-wait-ms caps the GVL wait per request and with it the threads." if per_request? && !max_wait_ns
          lines << "Memory: if it limits the processes, more threads per process still add throughput up to " \
                   "#{Advisor.count(curve.index { |p| p.busy >= 0.99 }&.+(1) || max_threads, 'thread')} (99 % of one GVL), " \
                   "at the cost of GVL wait." if processes > current_processes
          lines
        end
      end

      # "1 thread", "3 threads"; "1 process", "2 processes".
      def self.count(number, word) = "#{number} #{word}#{number == 1 ? '' : (word.end_with?('s') ? 'es' : 's')}"

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
      def initialize(workload, cores: nil, processes: nil, max_wait_ms: nil, max_threads: MAX_THREADS, target: TARGET)
        @workload = workload
        @cores = cores || Etc.nprocessors
        @processes = processes || workload.processes || 1
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
        kinds = model_kinds
        demand = kinds.sum { |kind| kind.share * kind.demand }
        idle = kinds.sum { |kind| kind.share * kind.idle }
        curve = curve_of(kinds.map { |kind| [kind.share, kind.demand, kind.idle] })
        threads = threads_on(curve)
        limited_by = curve[threads - 1].busy >= @target ? :throughput : :max_threads
        max_wait_ns = @max_wait_ms && @max_wait_ms * 1e6
        if max_wait_ns
          within = curve.select { |p| p.wait_per_demand * demand <= max_wait_ns }.map(&:threads).max || 1
          if within < threads
            threads = within
            limited_by = :wait
          end
        end
        Advice.new(workload: w, threads: threads, processes: processes_for, cores: @cores,
                   current_processes: @processes, no_collision_threads: (demand + idle) / demand, demand_ns: demand,
                   idle_per_request_ns: idle, run_share: demand / (demand + idle), curve: curve, target: @target,
                   max_wait_ns: max_wait_ns, limited_by: limited_by, kinds: kinds.size > 1 ? kinds : nil,
                   max_threads: @max_threads,
                   sensitivity: { idle_halved: threads_for(kinds) { |k| [k.demand, k.idle / 2.0] },
                                  idle_doubled: threads_for(kinds) { |k| [k.demand, k.idle * 2.0] },
                                  runqueue_as_idle: unless_same(threads_on(curve), kinds) { |k| [k.demand, k.measured_idle] },
                                  without_io_overlap: without_io_overlap(kinds, curve),
                                  without_cpu_wait: without_cpu_wait(kinds),
                                  one_kind: (threads_on(Advisor.curve(demand, idle, @max_threads)) if kinds.size > 1),
                                  exact_times: (threads_for(kinds, exponential: false) { |k| [k.demand, k.idle] } if kinds.size > 1) })
      end

      # The model's kinds of unit: one (the unit's totals), or one per WorkKind when the workload has
      # two or more. D per unit: the kind's holds with other threads' holds charged (Workload#charge).
      # Z per unit: the kind's idle, with its IO hidden in GVL wait put in (its own where counted per
      # unit, else the pool's shared out by each kind's idle) and the pool's wait for a CPU core left
      # out (Workload#runqueue_idle_ns), shared out by each kind's idle.
      def model_kinds
        w = @workload
        charge = w.charge
        overlap = w.io_overlap_wait_ns.to_i
        cpu_wait = w.runqueue_idle_ns
        # IO in flight during a GVL wait (a write's answer on its way while the thread waited for
        # the GVL back) is IO the request does: without the wait it would have been idle.
        one = lambda do |label, count, held, idle, part, own_overlap = nil|
          hidden = own_overlap || overlap * part
          ModelKind.new(label: label, share: count, demand: held * charge / count, measured_idle: (idle + hidden) / count,
                        cpu_wait: cpu_wait * part / count, overlap: hidden / count)
        end
        kinds = Array(w.kinds).select { |kind| kind.count.to_i.positive? }
        if w.count.to_i.positive? && kinds.size > 1
          idle_total = kinds.sum(&:idle_ns).to_f
          units = kinds.sum(&:count).to_f
          own = kinds.all?(&:io_overlap_wait_ns)
          kinds.map do |kind|
            part = idle_total.positive? ? kind.idle_ns / idle_total : kind.count / units
            one.(kind.label, kind.count, kind.held_ns, kind.idle_ns, part, own ? kind.io_overlap_wait_ns.to_f : nil)
               .tap { |model| model.share = kind.count / units }
          end
        else
          [one.(nil, w.count.to_i.positive? ? w.count.to_f : 1.0, w.held_ns, w.idle_ns, 1.0).tap { |model| model.share = 1.0 }]
        end
      end

      # The model's curve for kinds given as [share, D, Z]: one kind by mean value analysis (exact),
      # several by GVLSimulation, up to a few counts past the GVL's 99 % (and the current count).
      def curve_of(kinds)
        d, z = kinds.first[1..] if kinds.size == 1
        return Advisor.curve(d, z, @max_threads) if kinds.size == 1

        simulation = simulation_of(kinds)
        points = []
        past = nil
        (1..@max_threads).each do |threads|
          result = simulation.run(threads)
          points << Point.new(threads: threads, busy: result.busy, wait_per_demand: result.wait_ns / simulation.mean_hold_ns)
          past ||= threads if result.busy >= 0.99
          break if past && threads >= past + 2 && threads >= @workload.threads.to_i + 2
        end
        points
      end

      def simulation_of(kinds, exponential: true)
        GVLSimulation.new(kinds.map do |share, d, z|
          GVLSimulation::Kind.new(share: share, hold_ns: d, idle_ns: [z, 0.0].max)
        end, exponential: exponential)
      end

      # A busy GVL runs Ruby on one core at a time: one process per core uses them all.
      def processes_for = [@cores, @processes].max

      # The fewest threads whose GVL busy share reaches the target, or the most considered.
      def threads_on(curve) = (curve.find { |p| p.busy >= @target } || curve.last).threads

      # The recommendation with each kind's D and Z as the block gives them ([D, Z] for a ModelKind).
      # Several kinds: the simulation at counts around the one-kind answer (its busy share grows with
      # the count), not the whole curve.
      def threads_for(kinds, exponential: true)
        given = kinds.map { |kind| [kind.share, *yield(kind)] }
        return threads_on(curve_of(given)) if given.size == 1

        d = given.sum { |share, demand, _| share * demand }
        z = given.sum { |share, _, idle| share * idle }
        simulation = simulation_of(given, exponential: exponential)
        reaches = ->(threads) { simulation.run(threads).busy >= @target }
        threads = threads_on(Advisor.curve(d, z, @max_threads))
        if reaches.(threads)
          threads -= 1 while threads > 1 && reaches.(threads - 1)
        else
          threads += 1 while threads < @max_threads && !reaches.(threads)
        end
        threads
      end

      # threads_for's answer when it differs from +answer+; else nil.
      def unless_same(answer, kinds, &block)
        other = threads_for(kinds, &block)
        other unless other == answer
      end

      # The answer with the pool's run-queue wait taken out (a core free whenever a thread can run):
      # the part inside its holds (Workload#held_cpu_wait_ns) out of D, the rest out of idle (where
      # a thread back from IO waits for a core). Without the CPU time all of it comes out of idle:
      # the least the answer can be. nil without the run-queue wait.
      def without_cpu_wait(kinds)
        w = @workload
        return nil unless w.cpu_wait_ns

        in_holds = w.held_cpu_wait_ns
        held_scale = 1 - in_holds / (w.pool_held_ns || w.held_ns).to_f
        # The wait outside holds, shared out as the run-queue idle is (each kind's cpu_wait part).
        outside = w.cpu_wait_ns - in_holds
        counted = w.runqueue_idle_ns.to_f
        threads_for(kinds) do |kind|
          # (with none counted, shared by count: each unit gets the same)
          out_of_idle = counted.positive? ? kind.cpu_wait * outside / counted : outside / per_unit
          [kind.demand * held_scale, [kind.measured_idle - out_of_idle, 0.0].max]
        end
      end

      # Units the workload's totals are of (1 for per-thread numbers).
      def per_unit = @workload.count.to_i.positive? ? @workload.count.to_f : 1.0

      # The answer with the wait that IO in flight overlapped left as GVL wait (what the idle alone
      # says), when it differs; else nil.
      def without_io_overlap(kinds, curve)
        return nil unless @workload.io_overlap_wait_ns.to_i.positive?

        unless_same(threads_on(curve), kinds) { |kind| [kind.demand, [kind.idle - kind.overlap, 0.0].max] }
      end
    end
  end
end
