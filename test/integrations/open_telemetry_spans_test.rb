# frozen_string_literal: true

require_relative "../test_helper"
require_relative "../support/otlp_receiver"
require "logger"
require "rack"
require "rack/events"
require "rack/mock_request"
require "sidekiq"
require "opentelemetry/sdk"
require "opentelemetry-instrumentation-rack"
require "opentelemetry-instrumentation-sidekiq"
require "opentelemetry-exporter-otlp"
require "gvlscope/rack"
require "gvlscope/sidekiq"

# GVLScope::Rack's and GVLScope::Sidekiq's figures on the spans of the official OpenTelemetry
# instrumentations (opentelemetry-instrumentation-rack, -sidekiq) through the real SDK: read from
# its in-memory span exporter, and once as the official OTLP/HTTP exporter posts them (decoded from
# the protobuf a test server received). Each value must be the request's RequestTiming figure.
#
# The SDK is set up once per process (the instrumentations' tracers keep the first provider) and
# is the global tracer provider only during these tests: teardown puts back the API's placeholder,
# so that the rest of the suite builds its middlewares as in an app without tracing.
class OpenTelemetrySpansTest < Minitest::Test
  include GVLScopeTestHelper

  Spans = GVLScope::OpenTelemetrySpans
  EXPORTER = OpenTelemetry::SDK::Trace::Export::InMemorySpanExporter.new
  FIGURES = { Spans::WAIT => :wait_ms, Spans::RUN => :run_ms, Spans::IDLE => :idle_ms, Spans::GC => :gc_ms,
              Spans::PICKUP_WAIT => :pickup_wait_ms }.freeze

  def self.sdk_provider
    @sdk_provider ||= begin
      OpenTelemetry::SDK.configure do |c|
        c.logger = Logger.new(File::NULL)
        c.add_span_processor(OpenTelemetry::SDK::Trace::Export::SimpleSpanProcessor.new(EXPORTER))
        c.use "OpenTelemetry::Instrumentation::Rack"
        c.use "OpenTelemetry::Instrumentation::Sidekiq"
      end
      OpenTelemetry.tracer_provider
    end
  end

  def setup
    @placeholder = OpenTelemetry.tracer_provider
    @placeholder = nil unless @placeholder.instance_of?(OpenTelemetry::Internal::ProxyTracerProvider)
    provider = self.class.sdk_provider
    OpenTelemetry.tracer_provider = provider unless OpenTelemetry.tracer_provider.equal?(provider)
    EXPORTER.reset
    GVLScope::Breakdown.reset!
    GVLScope::Sidekiq.reset!
  end

  def teardown
    @burner&.kill&.join
    GVLScope::Sidekiq.reset!
    GVLScope::Breakdown.reset!
    OpenTelemetry.tracer_provider = @placeholder || OpenTelemetry::Internal::ProxyTracerProvider.new
  end

  # A thread that burns CPU while the request runs: each time the request's thread comes back from
  # its short sleeps it waits for the GVL, so the figures are not all zero.
  def burn_beside
    @burner = Thread.new { loop { nil } }
    sleep 0.01
  end

  # The app: three short sleeps (each a release and, beside the burner, a wait to get back), then 200.
  def app(raise_error: false)
    lambda do |env|
      @timing = env[GVLScope::Rack::ENV_KEY]
      3.times { sleep 0.002 }
      raise ArgumentError, "boom" if raise_error

      [200, { "content-type" => "text/plain" }, ["ok"]]
    end
  end

  def rack_instrumentation = OpenTelemetry::Instrumentation::Rack::Instrumentation.instance.middleware_args

  def get(stack, path = "/users/42")
    response = Rack::MockRequest.new(stack).get(path)
    assert_equal 200, response.status, response.body
    response
  end

  def finished_spans(kind = :server) = EXPORTER.finished_spans.select { |span| span.kind == kind }

  def the_span(kind = :server)
    spans = finished_spans(kind)
    assert_equal 1, spans.size, spans.map(&:name).inspect
    spans.first
  end

  # Each attribute is the request's figure, rounded to the µs; the parts add up.
  def assert_figures(span, timing)
    assert timing&.finished?, "the middleware finished the request's timing"
    FIGURES.each { |name, figure| assert_equal timing.public_send(figure).round(3), span.attributes.fetch(name), name }
    refute span.attributes.key?(Spans::QUEUE), "no hand-off told the arrival: no queue figure"
    parts = FIGURES.keys.first(4).sum { |name| span.attributes[name] }
    assert_in_delta timing.duration_ms + timing.pickup_wait_ms, parts, 0.005
  end

  def test_the_rack_instrumentations_span_gets_the_requests_figures
    stack = Rack::Builder.new.tap do |builder|
      builder.use(*rack_instrumentation) # Rack::Events with OpenTelemetry's handler: the default
      builder.use GVLScope::Rack, server_timing: false
      builder.run app
    end.to_app
    burn_beside
    get(stack)

    span = the_span
    assert_equal "GET", span.name
    assert_equal "/users/42", span.attributes["url.path"], "the instrumentation's own attributes stay"
    assert_figures(span, @timing)
    assert_operator span.attributes[Spans::WAIT], :>, 0, "the request waited for the GVL beside the burner"
    assert_operator span.attributes[Spans::RUN], :>, 0
    assert_operator span.attributes[Spans::IDLE], :>=, 5, "three 2 ms sleeps"
  end

  # GVLScope::Rack outermost (where docs/web.md puts it): OpenTelemetry's Rack::Events handler ends
  # its span when the body is closed, after the app call returned, so the span is still current there.
  def test_outside_the_rack_instrumentation_too
    stack = Rack::Builder.new.tap do |builder|
      builder.use GVLScope::Rack
      builder.use(*rack_instrumentation)
      builder.run app
    end.to_app
    response = get(stack)

    assert_figures(the_span, @timing)
    assert_match(/gvl-wait;dur=/, response["server-timing"], "the header as before")
  end

  # The instrumentation's other middleware (use_rack_events: false) ends its span in the call: only
  # from inside it does GVLScope::Rack see it.
  def test_inside_the_tracer_middleware
    stack = Rack::Builder.new.tap do |builder|
      builder.use OpenTelemetry::Instrumentation::Rack::Middlewares::Stable::TracerMiddleware
      builder.use GVLScope::Rack
      builder.run app
    end.to_app
    get(stack)

    assert_figures(the_span, @timing)
  end

  def test_a_request_that_raises_gets_its_figures_and_the_error
    stack = Rack::Builder.new.tap do |builder|
      builder.use(*rack_instrumentation)
      builder.use GVLScope::Rack
      builder.run app(raise_error: true)
    end.to_app
    assert_raises(ArgumentError) { Rack::MockRequest.new(stack).get("/boom") }

    span = the_span
    assert_equal OpenTelemetry::Trace::Status::ERROR, span.status.code
    assert_figures(span, @timing)
  end

  # open_telemetry: false, or no tracing set up when the middleware was built: nothing on the span,
  # and the middleware's #call is the one without spans (not one instruction more per request).
  def test_off_when_asked_or_when_tracing_was_not_set_up_at_build_time
    off = GVLScope::Rack.new(app, open_telemetry: false)
    OpenTelemetry.tracer_provider = @placeholder || OpenTelemetry::Internal::ProxyTracerProvider.new
    refute Spans.tracing?, "the API's placeholder provider: no tracing"
    built_without = GVLScope::Rack.new(app)
    OpenTelemetry.tracer_provider = self.class.sdk_provider
    assert Spans.tracing?

    [off, built_without].each do |middleware|
      assert_equal :call, middleware.method(:call).original_name, "the #call without spans"
      EXPORTER.reset
      stack = Rack::Builder.new.tap do |builder|
        builder.use(*rack_instrumentation)
        builder.run middleware
      end.to_app
      get(stack)
      assert_empty the_span.attributes.keys.grep(/\Aruby\.gvl\./)
    end
    assert_equal :call_with_span, GVLScope::Rack.new(app).method(:call).original_name, "tracing set up: on by default"
  end

  def test_no_span_no_work_and_a_bad_option_is_refused_at_build_time
    middleware = GVLScope::Rack.new(app)
    get(middleware) # no instrumentation: no span current
    assert_empty EXPORTER.finished_spans
    refute Spans.annotate(@timing), "nothing recording"

    error = assert_raises(GVLScope::Error) { GVLScope::Rack.new(app, open_telemetry: "yes") }
    assert_equal "GVLScope::Rack: open_telemetry must be true, false or nil (on when OpenTelemetry tracing is set up), " \
                 'got "yes"', error.message
  end

  # opentelemetry-instrumentation-sidekiq's server middleware (it prepends itself to the chain, so
  # it is outside GVLScope::Sidekiq) through Sidekiq's own chain, as its processor calls it.
  def test_the_sidekiq_instrumentations_span_gets_the_jobs_figures
    config = Sidekiq::Config.new
    config.logger = Logger.new(File::NULL)
    config.server_middleware do |chain|
      chain.add GVLScope::Sidekiq, stats_every: nil
      chain.prepend OpenTelemetry::Instrumentation::Sidekiq::Middlewares::Server::TracerMiddleware
    end
    enqueued_ms = Process.clock_gettime(Process::CLOCK_REALTIME, :millisecond) - 4900 # Sidekiq 8's stamp, 4.9 s ago
    job = { "class" => "HardJob", "args" => [], "jid" => "abc123", "queue" => "default", "enqueued_at" => enqueued_ms }
    burn_beside
    config.server_middleware.invoke(Object.new, job, "default") { 3.times { sleep 0.002 } }
    done_ms = Process.clock_gettime(Process::CLOCK_REALTIME, :millisecond)

    span = the_span(:consumer)
    assert_equal "default process", span.name
    assert_equal "HardJob", span.attributes["messaging.sidekiq.job_class"]
    entry = GVLScope::Breakdown.snapshot.find { |e| e.kind == :job } or flunk "the job was not counted"
    assert_equal 1, entry.count
    { Spans::WAIT => :wait_ns, Spans::RUN => :run_ns, Spans::IDLE => :idle_ns, Spans::GC => :gc_ns,
      Spans::PICKUP_WAIT => :pickup_wait_ns, Spans::QUEUE_LATENCY => :queue_latency_ns }.each do |name, field|
      assert_equal (entry.public_send(field) / 1e6).round(3), span.attributes.fetch(name), name
    end
    # From the stamp (to the ms) to the start: at least 4.9 s, at most until the job was done.
    assert_operator span.attributes[Spans::QUEUE_LATENCY], :>=, 4900 - 1
    assert_operator span.attributes[Spans::QUEUE_LATENCY], :<=, done_ms - enqueued_ms + 1
    assert_operator span.attributes[Spans::WAIT], :>, 0, "the job waited for the GVL beside the burner"
    assert_operator span.attributes[Spans::IDLE], :>=, 5, "three 2 ms sleeps"
  end

  # The official OTLP/HTTP trace exporter (protobuf, gzip) posts the request's span to a server of
  # the test, which decodes it: the figures arrive as double attributes.
  def test_the_otlp_http_exporter_carries_the_figures
    stack = Rack::Builder.new.tap do |builder|
      builder.use(*rack_instrumentation)
      builder.use GVLScope::Rack
      builder.run app
    end.to_app
    burn_beside
    get(stack)
    receiver = OTLPReceiver.new(:traces)
    exporter = OpenTelemetry::Exporter::OTLP::Exporter.new(endpoint: receiver.endpoint)
    assert_equal OpenTelemetry::SDK::Trace::Export::SUCCESS, exporter.export(EXPORTER.finished_spans)

    request = receiver.next_request or flunk "nothing was posted"
    assert_equal "/v1/traces", request.path
    spans = request.decoded.resource_spans.flat_map(&:scope_spans).flat_map(&:spans)
    assert_equal 1, spans.size
    span = spans.first
    assert_equal :SPAN_KIND_SERVER, span.kind
    received = span.attributes.to_h { |kv| [kv.key, kv.value] }
    FIGURES.each do |name, figure|
      assert_equal :double_value, received.fetch(name).value, name
      assert_equal @timing.public_send(figure).round(3), received.fetch(name).double_value, name
    end
    assert_operator received.fetch(Spans::WAIT).double_value, :>, 0
  ensure
    exporter&.shutdown
    receiver&.close
  end
end
