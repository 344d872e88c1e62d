# frozen_string_literal: true

require_relative "../metrics"
require_relative "../request_timing"
require_relative "../flight_recorder"
require_relative "../units"

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

    # env["gvlscope"]: see GVLScope::RequestTiming.
    RequestTiming = GVLScope::RequestTiming

    def initialize(app, **options)
      @app = app
      Options.reject_unknown!(options, OPTIONS, "GVLScope::Rack")

      @server_timing = options.fetch(:server_timing, true)
      @log_wait_over_ns = threshold_ns(options[:log_wait_over_ms], "log_wait_over_ms")
      @logger = options[:logger]
      @recorder_triggers = start_flight_recorder(options[:flight_recorder])
      @recorder_wait_over_ns, @recorder_duration_over_ns = @recorder_triggers&.values_at(:wait_over_ns, :duration_over_ns)
      @after_response = !!(@log_wait_over_ns || @recorder_triggers)
      # Per-request numbers come from the metrics' per-thread counters; they cost one hook that
      # is shared with everything else gvlscope does.
      Metrics.enable
      @warned = false
    end

    def call(env)
      timing = env[ENV_KEY] = RequestTiming.start
      response = @app.call(env)
      # Finishes the timing and, in the common case, adds the header in C; nil when it is not the
      # common case (a frozen response or headers, an Array value already there).
      done = timing.finish_response(response, @server_timing)
      return done if done && !@after_response

      report(env, timing, done || response, done.nil?)
    rescue Exception # rubocop:disable Lint/RescueException -- re-raised; unlike ensure, free when nothing is raised
      timing&.finish! # the app raised: env["gvlscope"] still ends up finished
      raise
    end

    private

    # Everything but the common case: the header on an unusual response, the slow-request log, the
    # flight recorder's triggers. Never lets gvlscope break a response: a failure here is reported
    # once, the response goes out.
    def report(env, timing, response, needs_header)
      response = with_server_timing(response, timing.server_timing) if needs_header
      log_slow(env, timing) if @log_wait_over_ns && timing.wait_ns >= @log_wait_over_ns
      trigger_flight_recorder(env, timing) if @recorder_triggers
      response
    rescue StandardError => e
      unless @warned
        @warned = true
        warn "gvlscope: GVLScope::Rack could not report a request: #{e.class}: #{e.message}"
      end
      response
    end

    def with_server_timing(response, value)
      status, headers, body = response
      headers = headers.dup if headers.frozen?
      key = headers.key?("Server-Timing") ? "Server-Timing" : "server-timing"
      existing = headers[key]
      headers[key] = if existing.is_a?(Array) then [*existing, value]
                     elsif existing && !existing.empty? then "#{existing}, #{value}"
                     else value
                     end
      [status, headers, body]
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
      why = if @recorder_wait_over_ns && timing.wait_ns >= @recorder_wait_over_ns
              format("gvl wait %.0f ms", timing.wait_ms)
            elsif @recorder_duration_over_ns && timing.duration_ns >= @recorder_duration_over_ns
              format("duration %.0f ms", timing.duration_ms)
            end
      FlightRecorder.dump_later("#{env['REQUEST_METHOD']} #{env['PATH_INFO']} #{why}") if why
    end

    def start_flight_recorder(option)
      return nil if option.nil? || option == false

      settings = option == true ? {} : option
      raise Error, "GVLScope::Rack: flight_recorder must be true or a Hash, got #{option.inspect}" unless settings.is_a?(Hash)

      triggers = RECORDER_TRIGGERS.merge(settings.slice(*RECORDER_TRIGGERS.keys))
      recorder_options = settings.except(*RECORDER_TRIGGERS.keys)
      Options.reject_unknown!(settings, RECORDER_TRIGGERS.keys + FlightRecorder::DEFAULTS.keys, "GVLScope::Rack",
                              what: "flight_recorder option")

      thresholds = { wait_over_ns: threshold_ns(triggers[:wait_over_ms], "flight_recorder wait_over_ms"),
                     duration_over_ns: threshold_ns(triggers[:duration_over_ms], "flight_recorder duration_over_ms") }
      # Already running (started by the Puma plugin, or by a preloaded master and restarted in
      # this worker after fork): share it.
      FlightRecorder.start(**recorder_options) unless FlightRecorder.running?
      thresholds
    end

    def threshold_ns(ms, name) = Units.ms_option_to_ns(ms, name, "GVLScope::Rack")
  end
end
