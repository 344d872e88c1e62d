# frozen_string_literal: true

require_relative "native"
require_relative "../support/units"
require_relative "callbacks"

module GVLScope
  # Event loops (ext/gvlscope/fibers.c): on a thread with a Fiber scheduler (Falcon, async), the
  # loop gives the thread to one task (a non-blocking fiber) at a time; a *turn* lasts until a task
  # gives it back. Every fiber that became ready meanwhile (its IO came, its sleep ended) waits for
  # the turn to end, as every thread waits for the GVL while one holds it. The turns' lengths are
  # how late the loop came back to its select: what Node.js' event-loop delay
  # (perf_hooks.monitorEventLoopDelay) tells of a Node process.
  #
  # Tracking (an event hook on fiber switches) starts at GVLScope::Rack's first request on a
  # loop's task (looked for in an Async server's process: Falcon), or with EventLoops.track; the
  # counts run from then on.
  module EventLoops
    # All loops of the process together. turn_histogram: Log2 buckets of ns per turn (bucket b >= 1
    # counts turns in [2^(b-1), 2^b) ns). longest_turn_ns: since tracking began.
    Turns = Struct.new(:turns, :busy_ns, :longest_turn_ns, :turn_histogram, keyword_init: true) do
      # The interval between two readings: counts subtract, the longest keeps the later value.
      def -(other)
        Turns.new(turns: turns - other.turns, busy_ns: busy_ns - other.busy_ns, longest_turn_ns: longest_turn_ns,
                  turn_histogram: turn_histogram.zip(other.turn_histogram).map { |now, before| now - before }.freeze).freeze
      end
    end
    NONE = Turns.new(turns: 0, busy_ns: 0, longest_turn_ns: 0, turn_histogram: Array.new(Log2::BUCKETS, 0).freeze).freeze

    class << self
      # Turns tracking on (or off); on, GVLScope::Rack's requests look for their loop too.
      def track(on = true)
        Native.loop_requests = true if on
        Native.loop_tracking = on
      end
      def tracking? = Native.loop_tracking?

      # A job run on this thread's loop (the calling task) that came over +io+: a job runner on
      # async whose worker tasks each pop their jobs from a socket (Redis' BRPOP on a TCP
      # connection of their own). Its timing starts before the block and finishes after it; its
      # loop wait runs from its bytes' arrival on io until the loop gave the task its turn
      # (RequestTiming.start_on_loop); enqueued_at: the job's stamp (RequestTiming#enqueued_at=),
      # for its queue latency. Its numbers go to the job series (Breakdown, under +label+ and
      # +tags+, a frozen Hash such as { queue: "default" }), as GVLScope::Sidekiq's. Returns the
      # finished RequestTiming; the block's exceptions pass through. Its numbers come from
      # GVLScope::Metrics, which the runner enables at its boot (GVLScope::Sidekiq does for its jobs).
      # GVLScope.on_job's callbacks get the finished timing and +job+ (the runner's payload; default
      # { "class" => label } and the tags, String-keyed), after the numbers are recorded.
      #
      #   timing = GVLScope::EventLoops.measure_job(redis_socket, "MailJob", enqueued_at: job["enqueued_at"], job: job) { run(job) }
      #   logger.info(timing.to_h.merge(jid: job["jid"]))  # loop_wait_ms among them
      def measure_job(io, label, tags = Breakdown::NO_TAGS, enqueued_at: nil, job: nil)
        # Metrics not enabled, Breakdown not required here: both load this file (a circle). `require
        # "gvlscope"` autoloads Breakdown; a runner enables the metrics once.
        raise Error, "GVLScope::EventLoops.measure_job: metrics are off (GVLScope::Metrics.enable at the runner's boot)" unless Native.metrics_enabled?

        timing = RequestTiming.start_on_loop(io)
        timing.enqueued_at = enqueued_at unless enqueued_at.nil?
        begin
          yield timing
        ensure
          timing.finish!
          Breakdown.record(:job, label, timing, tags)
          unless Callbacks.job.empty?
            Callbacks.job_finished(timing, job || { "class" => label, **tags.transform_keys(&:to_s) }, nil)
          end
        end
        timing
      end

      # The turns of every loop since tracking began (NONE when no loop gave one).
      def turns
        rows = Native.loop_turns.map { |values| Native::LOOP_ROW.zip(values).to_h }
        return NONE if rows.empty?

        Turns.new(turns: rows.sum { |row| row[:turns] }, busy_ns: rows.sum { |row| row[:busy_ns] },
                  longest_turn_ns: rows.map { |row| row[:longest_turn_ns] }.max,
                  turn_histogram: rows.map { |row| row[:turn_histogram] }.transpose.map(&:sum).freeze).freeze
      end
    end
  end
end
