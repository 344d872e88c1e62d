# frozen_string_literal: true

require_relative "native"
require_relative "../support/counters"

module GVLScope
  # One web request's times, in ns, for the thread that handled it (GVLScope::Rack makes one per
  # request; the counting is in C, ext/gvlscope/request_timing.c).
  #
  #   timing = GVLScope::RequestTiming.start # or .new; Thread.current by default; the request starts now
  #   ...                                    # run_ns, wait_ns, ... give the numbers so far
  #   timing.finish!                         # fixes them
  #
  # run, idle and GC count from #initialize to #finish!. GVL wait counts that too, plus the wait to
  # pick the request up (pickup_wait_ns): what the thread waited for the GVL since it finished its
  # previous request and since it last came back from idle (waiting for work, a sleep, IO): waits
  # before that belong to no request. A server thread woken for a new request must get the GVL
  # back before it can even parse it; beside a CPU-bound thread that is where a quick request
  # loses its 100 ms, before the app is called. io_overlap_wait_ns: the part of wait_ns that IO
  # the request had started overlapped (a write returned at once, the thread waited for the GVL
  # back while the answer was on its way, then its read blocked: docs/metrics.md). Numbers come
  # from GVLScope::Metrics, which must be enabled. A job's queue_latency_ns: from the enqueued_at
  # its runner gives (#enqueued_at=, wall clock) to the start; nil when none was given.
  # loop_wait_ns: on an event loop's task (a Falcon request, on a fiber of a thread with a Fiber
  # scheduler), what the request waited for the loop, from its bytes' arrival until the loop gave
  # its fiber the thread, but the GVL waits in between (pickup_wait_ns has those); 0 elsewhere,
  # and loop_wait_known? false (docs/fibers.md). releases: how many times the thread gave the GVL
  # up during the request (IO, sleeps, locks, preemptions: a count).
  class RequestTiming
    include Counters::Sums # held_ns, total_ns, counters, ...

    def run_ms = run_ns / 1e6
    def wait_ms = wait_ns / 1e6
    def idle_ms = idle_ns / 1e6
    def gc_ms = gc_ns / 1e6
    def pickup_wait_ms = pickup_wait_ns / 1e6
    def duration_ms = duration_ns / 1e6
    def queue_ms = (ns = queue_ns) && ns / 1e6
    def queue_thread_ms = (ns = queue_thread_ns) && ns / 1e6
    def queue_cpu_ms = (ns = queue_cpu_ns) && ns / 1e6
    def queue_latency_ms = (ns = queue_latency_ns) && ns / 1e6
    def loop_wait_ms = loop_wait_ns / 1e6

    def blocked_before_start_ms = (ns = blocked_before_start_ns) && ns / 1e6

    # The wait before the app or job, in words for a log line: how much of the wait came before the
    # start and, when a hand-off told when the work arrived (Handoffs), how long before the start
    # that was and how much of the wait was the thread blocked on the way (a lock, such as a job
    # logger's whose holder was itself waiting for the GVL, or a log write: the GVL's counters
    # cannot tell whose wait a lock's was, so that part is an upper bound).
    def before_start_words(what)
      words = format("%.1f ms of it before the %s started", pickup_wait_ms, what)
      return words unless (queue = queue_ms)

      words << format(", which it reached %.1f ms before", queue)
      return words << format("; %.1f ms waiting for its event loop (other fibers ran)", loop_wait_ms) if loop_wait_known?

      words << format("; %.1f ms of the wait blocked on the way " \
                      "(locks, log writes: GVL wait by their holders, at most)", blocked_before_start_ms)
      threads = queue_thread_ms
      words << format("; it waited %.1f ms for a free thread", threads) if threads&.positive?
      cpu = queue_cpu_ms
      words << format("; %.1f ms for its thread to be woken and given a CPU core", cpu) if cpu >= 0.1
      words << "; at least that much wait: more waits than the threads' logs hold" unless pickup_exact?
      words
    end

    # For structured loggers (lograge's custom_options, semantic_logger payloads).
    def to_h
      figures = { gvl_wait_ms: wait_ms.round(3), gvl_run_ms: run_ms.round(3), idle_ms: idle_ms.round(3),
                  gc_ms: gc_ms.round(3), duration_ms: duration_ms.round(3) }
      figures[:loop_wait_ms] = loop_wait_ms.round(3) if loop_wait_known?
      figures
    end

    def inspect
      format("#<%s%s wait %.3f ms (pickup %.3f), run %.3f ms, idle %.3f ms, gc %.3f ms, duration %.3f ms>",
             self.class, finished? ? "" : " (so far)", wait_ms, pickup_wait_ms, run_ms, idle_ms, gc_ms, duration_ms)
    end
  end
end
