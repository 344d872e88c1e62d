# frozen_string_literal: true

require_relative "../support/errors"

module GVLScope
  # A request's (a job's) GVL figures as attributes of its OpenTelemetry span: the span the
  # tracing instrumentation made for it (opentelemetry-instrumentation-rack's server span,
  # opentelemetry-instrumentation-sidekiq's consumer span), current when GVLScope::Rack's app call
  # (GVLScope::Sidekiq's job) returns. GVLScope::Rack and GVLScope::Sidekiq call #annotate when
  # their `open_telemetry:` option is on: by default when OpenTelemetry tracing is set up when they
  # are built (#tracing?). Without it they do nothing more per request: no lookup, no Ruby call.
  #
  # Attributes (docs/exporters.md, "Span attributes"), in milliseconds to the microsecond (doubles:
  # span attributes carry no unit, so the name does, as ms reads best in a trace view):
  #   ruby.gvl.wait_ms          GVL wait of the request's thread, the pickup wait included
  #   ruby.gvl.run_ms           running Ruby (holding the GVL) during the app call / job
  #   ruby.gvl.idle_ms          blocked on anything else (IO, sleep, locks)
  #   ruby.gvl.gc_ms            in GC
  #   ruby.gvl.pickup_wait_ms   the part of the wait before the app / job started
  #   ruby.gvl.queue_ms         from the arrival (a hand-off: Puma's accept, Sidekiq's fetch) to
  #                             the start; only when a hand-off told the arrival
  #   ruby.gvl.queue_latency_ms a job's time in its queue, from its enqueued_at to the start (the
  #                             pickup wait and queue_ms are part of it); jobs only
  #   ruby.gvl.loop_wait_ms     a request's wait for its event loop (Falcon: other fibers of its
  #                             thread ran), apart from the GVL wait; only on an event loop's task
  # run + wait + idle + gc = the app call's duration + pickup wait.
  module OpenTelemetrySpans
    WAIT = "ruby.gvl.wait_ms"
    RUN = "ruby.gvl.run_ms"
    IDLE = "ruby.gvl.idle_ms"
    GC = "ruby.gvl.gc_ms"
    PICKUP_WAIT = "ruby.gvl.pickup_wait_ms"
    QUEUE = "ruby.gvl.queue_ms"
    QUEUE_LATENCY = "ruby.gvl.queue_latency_ms"
    LOOP_WAIT = "ruby.gvl.loop_wait_ms"
    NAMES = [WAIT, RUN, IDLE, GC, PICKUP_WAIT, QUEUE, QUEUE_LATENCY, LOOP_WAIT].freeze

    module_function

    # `open_telemetry:` nil (on when #tracing?), true or false.
    def option(value, owner)
      case value
      when nil then tracing?
      when true, false then value
      else raise Error, "#{owner}: open_telemetry must be true, false or nil (on when OpenTelemetry tracing is set up), " \
                        "got #{value.inspect}"
      end
    end

    # Whether this process has OpenTelemetry tracing set up: the API is loaded and its global tracer
    # provider is no longer the placeholder the API starts with (OpenTelemetry::SDK.configure, or
    # another vendor's provider, replaced it). Loads nothing.
    def tracing?
      return false unless defined?(::OpenTelemetry::Trace) && ::OpenTelemetry.respond_to?(:tracer_provider)

      placeholder = defined?(::OpenTelemetry::Internal::ProxyTracerProvider) && ::OpenTelemetry::Internal::ProxyTracerProvider
      !(placeholder && ::OpenTelemetry.tracer_provider.instance_of?(placeholder))
    end

    # Adds +timing+'s figures to the current span when one is recording. True when it did.
    def annotate(timing)
      return false unless defined?(::OpenTelemetry::Trace)

      span = ::OpenTelemetry::Trace.current_span
      return false unless span.recording?

      span.add_attributes(attributes(timing))
      true
    end

    def attributes(timing)
      attributes = { WAIT => timing.wait_ms.round(3), RUN => timing.run_ms.round(3), IDLE => timing.idle_ms.round(3),
                     GC => timing.gc_ms.round(3), PICKUP_WAIT => timing.pickup_wait_ms.round(3) }
      queue = timing.queue_ms
      attributes[QUEUE] = queue.round(3) if queue
      latency = timing.queue_latency_ms
      attributes[QUEUE_LATENCY] = latency.round(3) if latency
      attributes[LOOP_WAIT] = timing.loop_wait_ms.round(3) if timing.loop_wait_known?
      attributes
    end
  end
end
