# frozen_string_literal: true

require "gvlscope"

module GVLScope
  # Rack middleware: how the thread that handled each request spent its time — running Ruby
  # (holding the GVL), waiting for the GVL while another thread held it, idle (IO, sleep, locks)
  # and in GC.
  #
  #   use GVLScope::Rack                                  # config.ru
  #   config.middleware.insert_before 0, GVLScope::Rack   # Rails: outermost, to see the whole request
  #
  # Options (anything else is a GVLScope::Error when the app is built, never at request time):
  #   server_timing:     true   adds `Server-Timing: gvl-wait;dur=…, gvl-run;dur=…, idle;dur=…, gc;dur=…`
  #   log_wait_over_ms:  nil    logs one line for each request that waited at least this long for the GVL
  #   logger:            nil    #warn receives that line; default env["rack.logger"], else $stderr
  #   flight_recorder:   nil    true or a Hash: keep the last seconds of GVL events and dump them
  #                             when a request waited or lasted too long (see FlightRecorder)
  #       wait_over_ms: 100, duration_over_ms: nil, and FlightRecorder.start's options
  #
  # env["gvlscope"] is a RequestTiming: read inside the app it gives the numbers so far, after the
  # app returned the numbers of the whole call.
  class Rack
    ENV_KEY = "gvlscope"
    OPTIONS = %i[server_timing log_wait_over_ms logger flight_recorder].freeze
    RECORDER_TRIGGERS = { wait_over_ms: 100, duration_over_ms: nil }.freeze

    # One request's times, in ns, for the thread that called the app.
    #
    # run, idle and GC count from the app call to its return. GVL wait counts that too, plus the
    # wait to pick the request up (pickup_wait_ns): what the thread waited for the GVL since it
    # finished its previous request (since it started, for its first). A server thread woken for
    # a new request must get the GVL back before it can even parse it; beside a CPU-bound thread
    # that is where a quick request loses its 100 ms, before the app is called.
    class RequestTiming
      WAIT = 1 # index of wait_ns in Native.metrics_thread
      LAST_END = :gvlscope_counters_at_request_end # a thread variable: counters when its last request ended

      attr_reader :thread, :pickup_wait_ns

      def initialize(thread = Thread.current)
        @thread = thread
        @started_ns = Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond)
        @before = Native.metrics_thread(thread)
        @after = @duration_ns = @run_ns = @wait_ns = @idle_ns = @gc_ns = nil # one object shape
        last_end = thread.thread_variable_get(LAST_END)
        # Negative after Metrics.reset: then nothing is known about the pickup.
        @pickup_wait_ns = [@before[WAIT] - (last_end ? last_end[WAIT] : 0), 0].max
      end

      # Freezes the numbers at the end of the app call.
      def finish!
        after = Native.metrics_thread(@thread)
        @duration_ns = Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond) - @started_ns
        @thread.thread_variable_set(LAST_END, after)
        before = @before
        @run_ns = after[0] - before[0]
        @wait_ns = after[1] - before[1] + @pickup_wait_ns
        @idle_ns = after[2] - before[2]
        @gc_ns = after[3] - before[3]
        @after = after
        freeze
      end

      def finished? = !@after.nil?

      # Before finish! (inside the app): the numbers so far.
      def run_ns = @after ? @run_ns : so_far(0)
      def wait_ns = @after ? @wait_ns : so_far(1) + @pickup_wait_ns
      def idle_ns = @after ? @idle_ns : so_far(2)
      def gc_ns = @after ? @gc_ns : so_far(3)
      def duration_ns = @duration_ns || Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond) - @started_ns

      def run_ms = run_ns / 1e6
      def wait_ms = wait_ns / 1e6
      def idle_ms = idle_ns / 1e6
      def gc_ms = gc_ns / 1e6
      def pickup_wait_ms = pickup_wait_ns / 1e6
      def duration_ms = duration_ns / 1e6

      # For structured loggers (lograge's custom_options, semantic_logger payloads).
      def to_h
        { gvl_wait_ms: wait_ms.round(3), gvl_run_ms: run_ms.round(3), idle_ms: idle_ms.round(3),
          gc_ms: gc_ms.round(3), duration_ms: duration_ms.round(3) }
      end

      # Milliseconds, µs precision (about 1 µs per response: formatting is most of the middleware's cost).
      def server_timing
        format("gvl-wait;dur=%.3f, gvl-run;dur=%.3f, idle;dur=%.3f, gc;dur=%.3f", wait_ns / 1e6, run_ns / 1e6,
               idle_ns / 1e6, gc_ns / 1e6)
      end

      private

      def so_far(index) = Native.metrics_thread(@thread)[index] - @before[index]
    end

    def initialize(app, **options)
      @app = app
      unknown = options.keys - OPTIONS
      raise Error, "GVLScope::Rack: unknown option #{unknown.map(&:inspect).join(', ')} (known: #{OPTIONS.join(', ')})" if unknown.any?

      @server_timing = options.fetch(:server_timing, true)
      @log_wait_over_ns = threshold_ns(options[:log_wait_over_ms], "log_wait_over_ms")
      @logger = options[:logger]
      @recorder_triggers = start_flight_recorder(options[:flight_recorder])
      # Per-request numbers come from the metrics' per-thread counters; they cost one hook that
      # is shared with everything else gvlscope does.
      Metrics.enable
      @warned = false
    end

    def call(env)
      timing = RequestTiming.new
      env[ENV_KEY] = timing
      status, headers, body = @app.call(env)
      timing.finish!
      [status, report(env, timing, headers), body]
    ensure
      timing.finish! if timing && !timing.finished?
    end

    private

    # Never lets gvlscope break a response: a failure here is reported once, the response goes out.
    def report(env, timing, headers)
      headers = add_server_timing(headers, timing.server_timing) if @server_timing
      log_slow(env, timing) if @log_wait_over_ns && timing.wait_ns >= @log_wait_over_ns
      trigger_flight_recorder(env, timing) if @recorder_triggers
      headers
    rescue StandardError => e
      unless @warned
        @warned = true
        warn "gvlscope: GVLScope::Rack could not report a request: #{e.class}: #{e.message}"
      end
      headers
    end

    def add_server_timing(headers, value)
      headers = headers.dup if headers.frozen?
      key = headers.key?("Server-Timing") ? "Server-Timing" : "server-timing"
      existing = headers[key]
      headers[key] = existing && !existing.empty? ? "#{existing}, #{value}" : value
      headers
    end

    def log_slow(env, timing)
      line = format("gvlscope: %s %s waited %.1f ms for the GVL (%.1f ms of it before the app ran); " \
                    "in the app %.1f ms: run %.1f ms, idle %.1f ms, gc %.1f ms",
                    env["REQUEST_METHOD"], env["PATH_INFO"], timing.wait_ms, timing.pickup_wait_ms, timing.duration_ms,
                    timing.run_ms, timing.idle_ms, timing.gc_ms)
      logger = @logger || env["rack.logger"]
      if logger then logger.warn(line) else $stderr.puts(line) end
    end

    def trigger_flight_recorder(env, timing)
      wait_over, duration_over = @recorder_triggers.values_at(:wait_over_ns, :duration_over_ns)
      why = if wait_over && timing.wait_ns >= wait_over then format("gvl wait %.0f ms", timing.wait_ms)
            elsif duration_over && timing.duration_ns >= duration_over then format("duration %.0f ms", timing.duration_ms)
            end
      FlightRecorder.dump_later("#{env['REQUEST_METHOD']} #{env['PATH_INFO']} #{why}") if why
    end

    def start_flight_recorder(option)
      return nil if option.nil? || option == false

      settings = option == true ? {} : option
      raise Error, "GVLScope::Rack: flight_recorder must be true or a Hash, got #{option.inspect}" unless settings.is_a?(Hash)

      triggers = RECORDER_TRIGGERS.merge(settings.slice(*RECORDER_TRIGGERS.keys))
      recorder_options = settings.except(*RECORDER_TRIGGERS.keys)
      unknown = recorder_options.keys - FlightRecorder::DEFAULTS.keys
      if unknown.any?
        raise Error, "GVLScope::Rack: unknown flight_recorder option #{unknown.map(&:inspect).join(', ')} " \
                     "(known: #{(RECORDER_TRIGGERS.keys + FlightRecorder::DEFAULTS.keys).join(', ')})"
      end

      thresholds = { wait_over_ns: threshold_ns(triggers[:wait_over_ms], "flight_recorder wait_over_ms"),
                     duration_over_ns: threshold_ns(triggers[:duration_over_ms], "flight_recorder duration_over_ms") }
      # Already running (started by the Puma plugin, or by a preloaded master and restarted in
      # this worker after fork): share it.
      FlightRecorder.start(**recorder_options) unless FlightRecorder.running?
      thresholds
    end

    def threshold_ns(ms, name)
      return nil if ms.nil?
      raise Error, "GVLScope::Rack: #{name} must be a number of milliseconds >= 0, got #{ms.inspect}" unless ms.is_a?(Numeric) && ms >= 0

      (ms * 1_000_000).to_i
    end
  end
end
