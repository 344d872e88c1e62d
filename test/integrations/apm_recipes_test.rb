# frozen_string_literal: true

require_relative "../test_helper"
require "json"
require "tmpdir"

# docs/apm.md's recipes against the real agent gems, offline: each recipe's snippet (the
# ```ruby config.ru block of its "### <Agent>" section, as written) serves three requests under
# a real Puma in a child Ruby, each as another thread burns 30 ms of CPU (so it waits for the GVL);
# a GVLScope.on_request block of the test, registered after the recipe's, keeps each request's
# RequestTiming figures. Then the child reads back what the agent recorded: what it sent to a
# receiver on the loopback (HTTPCollector as Datadog's trace agent, Sentry's and Honeybadger's
# endpoints; a UDP socket as DogStatsD), or, for New Relic (whose collector speaks only TLS), the
# transaction events and metrics the agent holds for its next harvest. Each recorded value must be
# the request's figure, exactly (both are the same Float, or its decimal text).
class APMRecipesTest < Minitest::Test
  include GVLScopeTestHelper

  DOC = File.join(ROOT, "docs/apm.md")
  PATHS = %w[/r0 /r1 /r2].freeze
  FIGURES = %w[gvl_wait_ms gvl_run_ms idle_ms gc_ms duration_ms].freeze

  # The recipe's snippet: the ```ruby config.ru block of docs/apm.md's "### +agent+" section.
  def snippet(agent)
    section = File.read(DOC)[/^### #{Regexp.escape(agent)}\n(.*?)(?=^##|\z)/m, 1]
    refute_nil section, "docs/apm.md has no ### #{agent} section"
    code = section[/^```ruby config\.ru\n(.*?)^```$/m, 1]
    refute_nil code, "docs/apm.md's ### #{agent} has no ```ruby config.ru snippet"
    code
  end

  # Runs +agent+'s recipe in a child Ruby: +setup+ (Ruby, run first: the agent's settings, the
  # receivers) and +read_back+ (Ruby whose value is what the agent recorded) around the requests.
  # Returns [timings, recorded]: path => the request's timing.to_h (string keys) and "wait_ms"; and
  # read_back's value through JSON.
  def serve_recipe(agent, setup:, read_back:)
    Dir.mktmpdir("gvlscope-apm") do |dir|
      config = File.join(dir, "config.ru")
      File.write(config, snippet(agent))
      out, err, status = run_ruby(<<~RUBY, env: { "GVLSCOPE_APM_DIR" => dir }, timeout: 60)
        require "json"
        require "net/http"
        require "socket"
        require "rack"
        require "puma"
        require "puma/server"
        require #{File.join(ROOT, 'test/support/http_collector').inspect}
        Dir.chdir(ENV.fetch("GVLSCOPE_APM_DIR")) # an agent's log file lands there
        #{setup}
        app = Rack::Builder.parse_file(#{config.inspect})
        timings = {}
        GVLScope.on_request { |timing, env| timings[env["PATH_INFO"]] = timing.to_h.merge(wait_ms: timing.wait_ms) }
        server = Puma::Server.new(app, nil, min_threads: 1, max_threads: 1, log_writer: Puma::LogWriter.null)
        server.add_tcp_listener("127.0.0.1", 0)
        server.run
        port = server.connected_ports.first
        clock = -> { Process.clock_gettime(Process::CLOCK_MONOTONIC) }
        #{PATHS.inspect}.each do |path|
          # 30 ms of CPU on another thread as the request comes: the server's threads wait for the GVL
          burner = Thread.new { deadline = clock.() + 0.03; nil while clock.() < deadline }
          response = Net::HTTP.get_response(URI("http://127.0.0.1:\#{port}\#{path}"))
          raise "\#{path}: \#{response.code}" unless response.code == "200" && response["server-timing"]
          burner.join
        end
        server.stop(true)
        recorded = begin
          #{read_back}
        end
        puts "RESULT \#{JSON.generate([timings, recorded])}"
      RUBY
      assert status.success?, "#{agent}'s recipe:\n#{err}\n#{out}"
      result = out[/^RESULT (.*)$/, 1]
      refute_nil result, "#{agent}'s recipe printed no result:\n#{out}\n#{err}"
      timings, recorded = JSON.parse(result)
      assert_equal PATHS, timings.keys.sort, "a timing per request"
      assert(timings.values.all? { |figures| figures["gvl_run_ms"].positive? }, "the requests ran: #{timings}")
      [timings, recorded]
    end
  end

  # Each request's figures as the recipe passes them (timing.to_h).
  def figures(timing) = timing.except("wait_ms")

  def test_new_relic
    timings, recorded = serve_recipe("New Relic", setup: <<~SETUP, read_back: <<~READ)
      closed = TCPServer.new("127.0.0.1", 0)
      ENV.update("NEW_RELIC_LICENSE_KEY" => "0" * 40, "NEW_RELIC_APP_NAME" => "gvlscope-test",
                 # no collector: connecting is refused at once on the loopback, and retried later
                 "NEW_RELIC_HOST" => "127.0.0.1", "NEW_RELIC_PORT" => closed.addr[1].to_s,
                 "NEW_RELIC_SEND_DATA_ON_EXIT" => "false", "NEW_RELIC_LOG_FILE_PATH" => Dir.pwd)
      # nor the cloud vendors' metadata addresses the agent reads before connecting
      %w[AWS AZURE GCP PCF DOCKER KUBERNETES].each { |vendor| ENV["NEW_RELIC_UTILIZATION_DETECT_\#{vendor}"] = "false" }
      closed.close
    SETUP
      agent = NewRelic::Agent.agent
      _, events = agent.transaction_event_aggregator.harvest!
      metric = agent.stats_engine.harvest!.to_h.find { |spec, _| spec.name == "Custom/GVL/wait_ms" }&.last
      { attributes: events.to_h { |_intrinsic, custom, agent_attributes| [agent_attributes[:"request.uri"], custom] },
        metric: metric && [metric.call_count, metric.total_call_time, metric.min_call_time, metric.max_call_time] }
    READ

    assert_equal PATHS.to_h { |path| [path, figures(timings[path])] }, recorded["attributes"],
                 "each transaction's custom attributes are its request's figures"
    waits = PATHS.map { |path| timings[path]["wait_ms"] }
    count, total, min, max = recorded["metric"]
    assert_equal [3, waits.min, waits.max], [count, min, max], "Custom/GVL/wait_ms: a value per request"
    assert_in_delta waits.sum, total, 1e-9
  end

  def test_datadog
    timings, recorded = serve_recipe("Datadog", setup: <<~SETUP, read_back: <<~READ)
      require "msgpack"
      trace_agent = HTTPCollector.new
      dogstatsd = UDPSocket.new
      dogstatsd.bind("127.0.0.1", 0)
      ENV.update("DD_TRACE_AGENT_URL" => trace_agent.url,
                 "DD_AGENT_HOST" => "127.0.0.1", "DD_DOGSTATSD_PORT" => dogstatsd.addr[1].to_s,
                 "DD_TRACE_TEST_MODE_ENABLED" => "true", # each trace sent as it finishes
                 "DD_INSTRUMENTATION_TELEMETRY_ENABLED" => "false", "DD_REMOTE_CONFIGURATION_ENABLED" => "false",
                 "DD_TRACE_STARTUP_LOGS" => "false")
    SETUP
      Datadog::Tracing.shutdown!
      ObjectSpace.each_object(Datadog::Statsd) { |statsd| statsd.flush(sync: true) }
      datagrams = []
      datagrams << dogstatsd.recv(65_536) while dogstatsd.wait_readable(0.5)
      spans = trace_agent.received("/v0.4/traces").flat_map { |request| MessagePack.unpack(request.body).flatten(1) }
      { spans: spans.select { |span| span["name"] == "rack.request" }
                    .to_h { |span| [URI(span.dig("meta", "http.url")).path, span["metrics"]] },
        datagrams: datagrams.flat_map { |datagram| datagram.split("\\n") }.grep(/\\Agvlscope\\./) }
    READ

    PATHS.each do |path|
      assert_equal figures(timings[path]), recorded.fetch("spans").fetch(path).slice(*FIGURES), "#{path}: the rack.request span's metrics"
    end
    expected = FIGURES.flat_map { |name| PATHS.map { |path| "gvlscope.#{name}:#{timings[path][name]}|d" } }
    assert_equal expected.sort, recorded.fetch("datagrams").sort, "a DogStatsD distribution per figure and request"
  end

  def test_sentry
    timings, recorded = serve_recipe("Sentry", setup: <<~SETUP, read_back: <<~READ)
      sentry = HTTPCollector.new
      ENV["SENTRY_DSN"] = "http://public@127.0.0.1:\#{sentry.port}/42"
    SETUP
      Sentry.close # sends what its background worker holds
      items = sentry.received("/api/42/envelope/").flat_map do |request|
        request.body.split("\\n").drop(1).each_slice(2).map { |header, payload| [JSON.parse(header)["type"], JSON.parse(payload)] }
      end
      items.select { |type, _| type == "transaction" }.to_h { |_, event| [event["transaction"], event["measurements"]] }
    READ

    PATHS.each do |path|
      measurements = recorded.fetch(path) { flunk "no transaction #{path}: #{recorded.keys}" }
      assert_equal figures(timings[path]).transform_values { |ms| { "value" => ms, "unit" => "millisecond" } }, measurements,
                   "#{path}: the transaction's measurements"
    end
  end

  def test_honeybadger_insights
    timings, recorded = serve_recipe("Honeybadger Insights", setup: <<~SETUP, read_back: <<~READ)
      honeybadger = HTTPCollector.new
      ENV.update("HONEYBADGER_API_KEY" => "gvlscope-test", "HONEYBADGER_REPORT_DATA" => "true",
                 "HONEYBADGER_CONNECTION_HOST" => "127.0.0.1", "HONEYBADGER_CONNECTION_PORT" => honeybadger.port.to_s,
                 "HONEYBADGER_CONNECTION_SECURE" => "false", "HONEYBADGER_LOGGING_PATH" => "honeybadger.log")
    SETUP
      Honeybadger.flush
      honeybadger.received("/v1/events").flat_map { |request| request.body.split("\\n").map { |line| JSON.parse(line) } }
    READ

    events = recorded.select { |event| event["event_type"] == "gvlscope.request" }
    assert_equal PATHS, events.map { |event| event["path"] }, "an event per request, in order: #{recorded}"
    events.each do |event|
      assert_equal "GET", event["method"]
      assert_equal figures(timings[event["path"]]), event.slice(*FIGURES), "#{event['path']}: the event's figures"
    end
  end
end
