# frozen_string_literal: true

require_relative "../metrics"
require_relative "../request_timing"
require_relative "../flight_recorder"
require_relative "../breakdown"
require_relative "../units"
require_relative "../callbacks"
require_relative "request_hooks"
require_relative "route_label"
require_relative "handoffs"
require_relative "log_writer"
require_relative "open_telemetry_spans"

module GVLScope
  # Rack middleware: how the thread that handled each request spent its time — running Ruby
  # (holding the GVL), waiting for the GVL while another thread held it, idle (IO, sleep, locks)
  # and in GC — per request and added up per route (GVLScope::Breakdown, which /metrics shows).
  #
  #   use GVLScope::Rack                                  # config.ru
  #   config.middleware.insert_before 0, GVLScope::Rack   # Rails: outermost, to see the whole request
  #
  # Options (anything else is a GVLScope::Error when the app is built, never at request time):
  #   server_timing:     true   adds `Server-Timing: gvl-wait;dur=…, gvl-run;dur=…` (ms; then idle and gc when not zero)
  #   log_wait_over_ms:  nil    logs one line for each request that waited at least this long for the GVL
  #                             (and, on an event loop's task, for its loop: loop_wait_ns)
  #                             (written by a thread of its own, GVLScope::LogWriter: never by the request)
  #   logger:            nil    #warn receives that line; default env["rack.logger"], else $stderr
  #   flight_recorder:   nil    true or a Hash: keep the last seconds of GVL events and dump them
  #                             when a request waited or lasted too long (see FlightRecorder)
  #       wait_over_ms: 100, duration_over_ms: nil, and FlightRecorder.start's options
  #   route:             nil    true: per-route numbers with the built-in labels (see RouteLabel);
  #                             ->(env) { "label" }: a request's route (after the app ran; nil: the
  #                             built-in one); false: no per-route numbers; nil: ROUTES_BY_DEFAULT
  #   max_routes:        nil    routes kept apart (Breakdown's cap, default 100); the rest are "other"
  #   sample:            1.0    share of requests measured (0.0..1.0); the others pass straight
  #                             through: no header, no env["gvlscope"], no per-route numbers
  #   open_telemetry:    nil    true: the request's figures as attributes of the OpenTelemetry span
  #                             current when the app returns (OpenTelemetrySpans: ruby.gvl.wait_ms …);
  #                             nil: on when OpenTelemetry tracing is set up when the middleware is
  #                             built; false: off (then nothing is looked up per request)
  #
  # env["gvlscope"] is a RequestTiming: read inside the app it gives the numbers so far, after the
  # app returned the numbers of the whole call.
  class Rack
    ENV_KEY = "gvlscope"
    OPTIONS = %i[server_timing log_wait_over_ms logger flight_recorder route max_routes sample open_telemetry].freeze
    OWNER = "GVLScope::Rack"

    # env["gvlscope"]: see GVLScope::RequestTiming.
    RequestTiming = GVLScope::RequestTiming

    # Per-route numbers would be on by default where they fit gvlscope's web budget (its own work
    # <= 2 % of a hello-world request, docs/performance.md). With every Puma request followed from
    # its arrival (Handoffs) they fit nowhere: on 3.4.5 1.9 % without them, 2.4 % with (~770
    # instructions a request); on 3.3.8, which hashes the key at each of the label's three env
    # lookups, ~1,100. `route: true` turns them on.
    ROUTES_BY_DEFAULT = false

    def initialize(app, **options)
      @app = app
      Options.reject_unknown!(options, OPTIONS, OWNER)

      @server_timing = options.fetch(:server_timing, true)
      @log_wait_over_ns = Units.ms_option_to_ns(options[:log_wait_over_ms], "log_wait_over_ms", OWNER)
      @logger = options[:logger]
      @sample = RequestHooks.sample_rate(options[:sample], OWNER)
      @sampling = @sample < 1.0
      @route = route_option(options[:route])
      Breakdown.configure(max_routes: options[:max_routes]) if options.key?(:max_routes)
      routes = routes_in(options.fetch(:route, nil))
      @routes = RouteLabel.new unless routes == :off
      @recorder_triggers = RequestHooks.flight_recorder_triggers(options[:flight_recorder], OWNER)
      @spans = OpenTelemetrySpans.option(options[:open_telemetry], OWNER)
      # With spans, this middleware's #call is #call_with_span: the common request still ends in C,
      # then looks its span up. Without, #call is untouched: not one instruction more.
      singleton_class.alias_method(:call, :call_with_span) if @spans
      @after_response = !!(@log_wait_over_ns || @recorder_triggers)
      # The common request's work in two C calls (ext/gvlscope/breakdown.c): the timing made and put
      # in env; then finished, its route recorded (the built-in labels of routes seen before) and the
      # header added. Per-request numbers come from the metrics' per-thread counters; they cost one
      # hook that is shared with everything else gvlscope does.
      @requests = Native::RackRequests.new(@sample, @server_timing, routes, @after_response)
      Metrics.enable
      @warning = RequestHooks::Warning.new { |line| @logger ? @logger.warn(line) : warn(line) }
      # The wait before the app: Puma's threads that ready a request for the pool. A Puma without
      # the method says so once per process, at boot: its numbers leave that wait out.
      Handoffs.install_puma { |line| @warning.warn(line) }
      # Requests on an event loop's fibers (Falcon runs on Async): each looks for its loop wait.
      Native.loop_requests = true if defined?(::Async::Scheduler)
    end

    def call(env)
      return @app.call(env) if @sampling && rand >= @sample # Kernel#rand: reseeded in each forked child

      timing = @requests.start(env) # env["gvlscope"] = a RequestTiming started now
      response = @app.call(env)
      done = @requests.finish(timing, env, response) # the response, or false / nil: see #finish_in_ruby
      return done if done # one local and no ivar: each Ruby step here costs every request ~20-30 instructions

      finish_in_ruby(env, timing, response, done)
    rescue Exception # rubocop:disable Lint/RescueException -- re-raised; unlike ensure, free when nothing is raised
      if timing && !timing.finished? # the app raised: env["gvlscope"] still ends up finished and counted
        timing.finish!
        record_route(env, nil, timing) if @routes
        Callbacks.request_finished(timing, env, @logger)
      end
      raise
    end

    # #call when open_telemetry: is on (#initialize makes it this middleware's #call): the same,
    # and the request's figures on the OpenTelemetry span current when the app returned.
    def call_with_span(env)
      return @app.call(env) if @sampling && rand >= @sample

      timing = @requests.start(env)
      response = @app.call(env)
      done = @requests.finish(timing, env, response)
      annotate_span(timing)
      return done if done

      finish_in_ruby(env, timing, response, done)
    rescue Exception # rubocop:disable Lint/RescueException -- re-raised, as in #call
      if timing && !timing.finished?
        timing.finish!
        record_route(env, nil, timing) if @routes
        annotate_span(timing)
        Callbacks.request_finished(timing, env, @logger)
      end
      raise
    end

    private

    # What RackRequests#finish left (the timing is finished): the route when it returned false (a
    # route function, or a route not seen yet: C then learns its series), the header when it could
    # not add it (a timing adds it once), GVLScope.on_request's callbacks (C leaves every request to
    # this method while there are some), the slow-request log and the flight recorder's triggers.
    def finish_in_ruby(env, timing, response, route_recorded)
      record_route(env, response, timing) if route_recorded == false && @routes
      done = timing.finish_response(response, @server_timing)
      Callbacks.request_finished(timing, env, @logger) unless Callbacks.request.empty?
      return done if done && !@after_response

      report(env, timing, done || response, done.nil?)
    end

    # Everything but the common case: the header on an unusual response, the slow-request log, the
    # flight recorder's triggers. Never lets gvlscope break a response: a failure here is reported
    # once, the response goes out.
    def report(env, timing, response, needs_header)
      response = with_server_timing(response, timing.server_timing) if needs_header
      log_slow(env, timing) if @log_wait_over_ns && timing.wait_ns + timing.loop_wait_ns >= @log_wait_over_ns
      trigger_flight_recorder(env, timing) if @recorder_triggers
      response
    rescue StandardError => e
      @warning.warn("gvlscope: GVLScope::Rack could not report a request: #{e.class}: #{e.message}")
      response
    end

    # The request's figures on its span (an app that raised too: OpenTelemetry's middleware records
    # the exception on it). Never raises.
    def annotate_span(timing)
      OpenTelemetrySpans.annotate(timing)
    rescue StandardError => e
      @warning.warn("gvlscope: GVLScope::Rack could not add a request's figures to its span: #{e.class}: #{e.message}")
    end

    # The request's numbers into its route's series. Never raises: a route function that fails
    # is warned about (at most once a minute) and the built-in label is used.
    def record_route(env, response, timing)
      status = response ? response[0] : 500
      label = (route_from_option(env) if @route) || @routes.call(env, status)
      series = Breakdown.record(:route, label, timing, Breakdown::NO_TAGS, @sample)
      @requests.remember(env, response, series) unless @route
    rescue StandardError => e
      @warning.warn("gvlscope: GVLScope::Rack could not count a request by route: #{e.class}: #{e.message}")
    end

    def route_from_option(env)
      label = @route.call(env)
      label&.to_s
    rescue StandardError => e
      @warning.warn("gvlscope: GVLScope::Rack's route function raised #{e.class}: #{e.message}; the built-in route is used")
      nil
    end

    # Who names a request's route (Native::RackRequests): C once it knows the label, Ruby for a function.
    def routes_in(option)
      return :ruby if @route
      return :built_in if option == true || (option.nil? && ROUTES_BY_DEFAULT)

      :off
    end

    def route_option(option)
      return nil if option.nil? || option == false || option == true
      return option if option.respond_to?(:call)

      raise Error, "#{OWNER}: route must be true, false or respond to call(env) (a Proc), got #{option.inspect}"
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
      loop_words = timing.loop_wait_known? ? format(" and %.1f ms for its event loop", timing.loop_wait_ms) : ""
      line = format("gvlscope: %s %s waited %.1f ms for the GVL%s (%s); " \
                    "in the app %.1f ms: run %.1f ms, idle %.1f ms, gc %.1f ms",
                    env["REQUEST_METHOD"], env["PATH_INFO"], timing.wait_ms, loop_words, timing.before_start_words("app"),
                    timing.duration_ms, timing.run_ms, timing.idle_ms, timing.gc_ms)
      LogWriter.shared.write(line, @logger || env["rack.logger"])
    end

    def trigger_flight_recorder(env, timing)
      why = RequestHooks.recorder_trigger(@recorder_triggers, timing)
      FlightRecorder.dump_later("#{env['REQUEST_METHOD']} #{env['PATH_INFO']} #{why}") if why
    end
  end
end
