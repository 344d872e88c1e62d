# frozen_string_literal: true

require_relative "../test_helper"
require "json"
require "tmpdir"
require "uri"
require_relative "../support/redis_server"
require_relative "../support/rails_apm_app"

# docs/apm.md's recipes against the real agent gems, offline. Each agent's two snippets (the
# ```ruby config.ru and ```ruby sidekiq blocks of its "### <Agent>" section, as written) run in a
# child Ruby: the config.ru serves three requests under a real Puma, the Sidekiq initializer runs
# three jobs in Sidekiq embedded (against a real Redis), each as another thread burns CPU (so they
# wait for the GVL). A GVLScope.on_request (on_job) block of the test, registered after the
# recipe's, keeps each one's RequestTiming figures. Then the child reads back what the agent
# recorded: what it sent to a receiver on the loopback (HTTPCollector as Datadog's trace agent,
# Sentry's and Honeybadger's endpoints, AppSignal's OTLP collector; a UDP socket as DogStatsD),
# or, for New Relic (whose collector speaks only TLS), the transaction events and metrics the
# agent holds for its next harvest. Each recorded value must be the request's (job's) figure,
# exactly (the same Float, or its decimal text).
#
# Each request recipe runs again in a Rails app (test/support/rails_apm_app.rb), as docs/apm.md's
# "In a Rails app" says: the agent's Railtie places its middleware, GVLScope::Rack is where
# docs/web.md puts it (first), the recipe is an initializer. There an agent whose transaction
# ends inside GVLScope::Rack would get nothing from the block, silently: the values must arrive.
# GVLSCOPE_TEST_VERBOSE=1 prints each app's middleware stack.
class APMRecipesTest < Minitest::Test
  include GVLScopeTestHelper

  DOC = File.join(ROOT, "docs/apm.md")
  PATHS = %w[/r0 /r1 /r2].freeze
  FIGURES = %w[gvl_wait_ms gvl_run_ms idle_ms gc_ms duration_ms].freeze

  # The recipe's snippet of +kind+ (config.ru, sidekiq): the ```ruby KIND block of docs/apm.md's
  # "### +agent+" section.
  def snippet(agent, kind)
    code = section(agent)[/^```ruby #{Regexp.escape(kind)}\n(.*?)^```$/m, 1]
    refute_nil code, "docs/apm.md's ### #{agent} has no ```ruby #{kind} snippet"
    code
  end

  def section(agent)
    section = File.read(DOC)[/^### #{Regexp.escape(agent)}\n(.*?)(?=^##|\z)/m, 1]
    refute_nil section, "docs/apm.md has no ### #{agent} section"
    section
  end

  # The recipe's initializer in a Rails app, as docs/apm.md's "In a Rails app" says: its section's
  # ```ruby rails-apm snippet, else its config.ru's lines above its `use` lines.
  def rails_initializer(agent)
    section(agent)[/^```ruby rails-apm\n(.*?)^```$/m, 1] || snippet(agent, "config.ru")[/\A.*?(?=^use )/m]
  end

  # The requests' part of the child: the recipe as Puma's app, three requests.
  def serve_requests(path) = <<~RUBY
    require "net/http"
    require "rack"
    require "puma"
    require "puma/server"
    app = Rack::Builder.parse_file(#{path.inspect})
    timings = {}
    GVLScope.on_request { |timing, env| timings[env["PATH_INFO"]] = timing.to_h.merge(wait_ms: timing.wait_ms) }
    server = Puma::Server.new(app, nil, min_threads: 1, max_threads: 1, log_writer: Puma::LogWriter.null)
    server.add_tcp_listener("127.0.0.1", 0)
    server.run
    port = server.connected_ports.first
    #{PATHS.inspect}.each do |path|
      burner = burn_beside.()
      response = Net::HTTP.get_response(URI("http://127.0.0.1:\#{port}\#{path}"))
      raise "\#{path}: \#{response.code}" unless response.code == "200" && response["server-timing"]
      burner.join
    end
    server.stop(true)
  RUBY

  # The jobs' part of the child: the recipe as the Sidekiq initializer, three jobs run by Sidekiq
  # embedded in the child (the initializer's configure_server blocks run as it is configured, in
  # their order, as in `sidekiq -r`), against the real Redis at +redis_url+.
  def run_jobs(path, redis_url) = <<~RUBY
    require "sidekiq"
    ENV["REDIS_URL"] = #{redis_url.inspect}
    require #{path.inspect}
    class APMRecipeJob
      include Sidekiq::Job
      def perform = 3.times { sleep 0.001 }
    end
    timings = {}
    GVLScope.on_job { |timing, job| timings[job["jid"]] = timing.to_h.merge(wait_ms: timing.wait_ms) }
    Array.new(#{PATHS.size}) { APMRecipeJob.perform_async }
    sidekiq = Sidekiq.configure_embed do |config|
      config.concurrency = 1
      config.logger.level = Logger::WARN
    end
    sidekiq.run
    deadline = clock.() + 30
    until timings.size == #{PATHS.size}
      raise "jobs not run in 30 s: \#{timings.size} done" if clock.() > deadline

      burn_beside.().join
      sleep 0.01
    end
    sidekiq.stop
  RUBY

  # Runs +agent+'s recipe of +kind+ in a child Ruby: +setup+ (Ruby, run first: the agent's settings,
  # the receivers), the requests (config.ru; rails: the Rails app) or jobs (sidekiq), then +read_back+ (Ruby whose value
  # is what the agent recorded). Returns [timings, recorded]: path (jid) => the request's (job's)
  # timing.to_h (string keys) and "wait_ms"; and read_back's value through JSON.
  # A request recipe's two tests: test_<name> runs its config.ru, test_<name>_in_rails its Rails
  # initializer in a Rails app (docs/apm.md, "In a Rails app"); assert_<name> checks what the agent
  # recorded against each request's figures. The block gives the read-back code (in the test).
  def self.request_recipe(name, agent, setup, &read_back)
    { "" => "config.ru", "_in_rails" => "rails" }.each do |suffix, kind|
      define_method(:"test_#{name}#{suffix}") do
        send(:"assert_#{name}", *run_recipe(agent, kind: kind, setup: setup, read_back: instance_exec(&read_back)))
      end
    end
  end

  def run_recipe(agent, setup:, read_back:, kind: "config.ru")
    redis = RedisServer.new if kind == "sidekiq"
    Dir.mktmpdir("gvlscope-apm") do |dir|
      if kind == "rails"
        path = RailsAPMApp.write(dir, agent, rails_initializer(agent))
      else
        path = File.join(dir, kind == "sidekiq" ? "initializer.rb" : "config.ru")
        File.write(path, snippet(agent, kind))
      end
      env = { "GVLSCOPE_APM_DIR" => dir }
      env["RAILS_ENV"] = "production" if kind == "rails"
      out, err, status = run_ruby(<<~RUBY, env: env, timeout: 60)
        require "json"
        require "socket"
        require "logger"
        require #{File.join(ROOT, 'test/support/http_collector').inspect}
        Dir.chdir(ENV.fetch("GVLSCOPE_APM_DIR")) # an agent's log file lands there
        clock = -> { Process.clock_gettime(Process::CLOCK_MONOTONIC) }
        # 30 ms of CPU on another thread as a request (job) comes: the server's threads wait for the GVL
        burn_beside = -> { Thread.new { deadline = clock.() + 0.03; nil while clock.() < deadline } }
        #{'require "action_controller/railtie" # before any agent, as in a Rails app: AppSignal loads its Railtie only after Rails' if kind == 'rails'}
        #{setup}
        #{kind == 'sidekiq' ? run_jobs(path, redis.url) : serve_requests(path)}
        recorded = begin
          #{read_back}
        end
        puts "RESULT \#{JSON.generate([timings, recorded])}"
        puts "STACK \#{JSON.generate(Rails.application.middleware.map(&:name))}" if defined?(Rails.application)
      RUBY
      stack = out[/^STACK (.*)$/, 1]
      warn "#{agent} in Rails: #{stack}" if stack && ENV["GVLSCOPE_TEST_VERBOSE"]
      assert status.success?, "#{agent}'s #{kind} recipe:\n#{err}\n#{out}#{RailsAPMApp.log(dir) if kind == 'rails'}"
      result = out[/^RESULT (.*)$/, 1]
      refute_nil result, "#{agent}'s #{kind} recipe printed no result:\n#{out}\n#{err}"
      timings, recorded = JSON.parse(result)
      assert_equal PATHS.size, timings.size, "a timing per request (job)"
      assert(timings.values.all? { |figures| figures["gvl_run_ms"].positive? }, "they ran: #{timings}")
      [timings, recorded]
    end
  ensure
    redis&.stop
  end

  # Each request's (job's) figures as the recipe passes them (timing.to_h).
  def figures(timing) = timing.except("wait_ms")

  # The figures of all the jobs, in an order that does not depend on which ran first: what was
  # recorded for them with no job id beside it is compared with this.
  def all_figures(figure_lists) = figure_lists.sort_by { |figures| JSON.generate(figures) }

  def skip_without_redis
    skip "redis-server is not installed (script/test installs it)" unless RedisServer.available?
  end

  NEW_RELIC = <<~'RUBY'
    closed = TCPServer.new("127.0.0.1", 0)
    ENV.update("NEW_RELIC_LICENSE_KEY" => "0" * 40, "NEW_RELIC_APP_NAME" => "gvlscope-test",
               # no collector: connecting is refused at once on the loopback, and retried later
               "NEW_RELIC_HOST" => "127.0.0.1", "NEW_RELIC_PORT" => closed.addr[1].to_s,
               "NEW_RELIC_SEND_DATA_ON_EXIT" => "false", "NEW_RELIC_LOG_FILE_PATH" => Dir.pwd)
    # nor the cloud vendors' metadata addresses the agent reads before connecting
    %w[AWS AZURE GCP PCF DOCKER KUBERNETES].each { |vendor| ENV["NEW_RELIC_UTILIZATION_DETECT_#{vendor}"] = "false" }
    closed.close
  RUBY

  # What the agent holds for its next harvest: each transaction event's [name, custom attributes,
  # request.uri], and the custom metric +metric+'s [count, total, min, max].
  def new_relic_read_back(metric) = <<~RUBY
    agent = NewRelic::Agent.agent
    _, events = agent.transaction_event_aggregator.harvest!
    metric = agent.stats_engine.harvest!.to_h.find { |spec, _| spec.name == #{metric.inspect} }&.last
    { events: events.map { |intrinsic, custom, agent_attributes| [intrinsic["name"], custom, agent_attributes[:"request.uri"]] },
      metric: metric && [metric.call_count, metric.total_call_time, metric.min_call_time, metric.max_call_time] }
  RUBY

  def assert_new_relic_metric(recorded, waits, name)
    count, total, min, max = recorded["metric"]
    assert_equal [waits.size, waits.min, waits.max], [count, min, max], "#{name}: a value per request (job)"
    assert_in_delta waits.sum, total, 1e-9
  end

  request_recipe(:new_relic, "New Relic", NEW_RELIC) { new_relic_read_back("Custom/GVL/wait_ms") }

  def assert_new_relic(timings, recorded)
    attributes = recorded["events"].to_h { |_name, custom, uri| [uri, custom] }
    assert_equal PATHS.to_h { |path| [path, figures(timings[path])] }, attributes,
                 "each transaction's custom attributes are its request's figures"
    assert_new_relic_metric(recorded, PATHS.map { |path| timings[path]["wait_ms"] }, "Custom/GVL/wait_ms")
  end

  def test_new_relic_jobs
    skip_without_redis
    timings, recorded = run_recipe("New Relic", kind: "sidekiq", setup: NEW_RELIC, read_back: new_relic_read_back("Custom/GVL/job_wait_ms"))

    jobs = recorded["events"].select { |name, _, _| name == "OtherTransaction/SidekiqJob/APMRecipeJob/perform" }
    assert_equal all_figures(timings.values.map { |timing| figures(timing) }), all_figures(jobs.map { |_, custom, _| custom }),
                 "each job transaction's custom attributes are a job's figures: #{recorded['events']}"
    assert_new_relic_metric(recorded, timings.values.map { |timing| timing["wait_ms"] }, "Custom/GVL/job_wait_ms")
  end

  DATADOG = <<~'RUBY'
    require "msgpack"
    trace_agent = HTTPCollector.new
    dogstatsd = UDPSocket.new
    dogstatsd.bind("127.0.0.1", 0)
    ENV.update("DD_TRACE_AGENT_URL" => trace_agent.url,
               "DD_AGENT_HOST" => "127.0.0.1", "DD_DOGSTATSD_PORT" => dogstatsd.addr[1].to_s,
               "DD_TRACE_TEST_MODE_ENABLED" => "true", # each trace sent as it finishes
               "DD_INSTRUMENTATION_TELEMETRY_ENABLED" => "false", "DD_REMOTE_CONFIGURATION_ENABLED" => "false",
               "DD_TRACE_STARTUP_LOGS" => "false")
  RUBY

  # The spans the trace agent received (name, metrics, meta) and the recipe's DogStatsD datagrams.
  DATADOG_READ_BACK = <<~'RUBY'
    Datadog::Tracing.shutdown!
    ObjectSpace.each_object(Datadog::Statsd) { |statsd| statsd.flush(sync: true) }
    datagrams = []
    datagrams << dogstatsd.recv(65_536) while dogstatsd.wait_readable(0.5)
    spans = trace_agent.received("/v0.4/traces").flat_map { |request| MessagePack.unpack(request.body).flatten(1) }
    { spans: spans.map { |span| span.slice("name", "metrics", "meta") },
      datagrams: datagrams.flat_map { |datagram| datagram.split("\n") }.grep(/\Agvlscope\./) }
  RUBY

  request_recipe(:datadog, "Datadog", DATADOG) { DATADOG_READ_BACK }

  def assert_datadog(timings, recorded)
    spans = recorded["spans"].select { |span| span["name"] == "rack.request" }.to_h { |span| [URI(span.dig("meta", "http.url")).path, span] }
    PATHS.each do |path|
      span = spans.fetch(path) { flunk "no rack.request span of #{path}: #{recorded['spans']}" }
      assert_equal figures(timings[path]), span["metrics"].slice(*FIGURES), "#{path}: the rack.request span's metrics"
    end
    expected = FIGURES.flat_map { |name| PATHS.map { |path| "gvlscope.#{name}:#{timings[path][name]}|d" } }
    assert_equal expected.sort, recorded.fetch("datagrams").sort, "a DogStatsD distribution per figure and request"
  end

  def test_datadog_jobs
    skip_without_redis
    timings, recorded = run_recipe("Datadog", kind: "sidekiq", setup: DATADOG, read_back: DATADOG_READ_BACK)

    spans = recorded["spans"].select { |span| span["name"] == "sidekiq.job" }.to_h { |span| [span.dig("meta", "sidekiq.job.id"), span] }
    timings.each do |jid, timing|
      span = spans.fetch(jid) { flunk "no sidekiq.job span of #{jid}: #{recorded['spans']}" }
      assert_equal figures(timing), span["metrics"].slice(*FIGURES), "#{jid}: the sidekiq.job span's metrics"
    end
    expected = FIGURES.flat_map { |name| timings.values.map { |timing| "gvlscope.job.#{name}:#{timing[name]}|d|#job:APMRecipeJob" } }
    assert_equal expected.sort, recorded.fetch("datagrams").sort, "a DogStatsD distribution per figure and job"
  end

  SENTRY = <<~'RUBY'
    sentry = HTTPCollector.new
    ENV["SENTRY_DSN"] = "http://public@127.0.0.1:#{sentry.port}/42"
  RUBY

  # The transactions Sentry sent: [name, measurements, the request's URL].
  SENTRY_READ_BACK = <<~'RUBY'
    Sentry.close # sends what its background worker holds
    items = sentry.received("/api/42/envelope/").flat_map do |request|
      request.body.split("\n").drop(1).each_slice(2).map { |header, payload| [JSON.parse(header)["type"], JSON.parse(payload)] }
    end
    items.select { |type, _| type == "transaction" }.map { |_, event| [event["transaction"], event["measurements"], event.dig("request", "url")] }
  RUBY

  def measurements(timing) = figures(timing).transform_values { |ms| { "value" => ms, "unit" => "millisecond" } }

  request_recipe(:sentry, "Sentry", SENTRY) { SENTRY_READ_BACK }

  def assert_sentry(timings, recorded)
    # By the request's path: in Rails every transaction is named after the action (RequestsController#show).
    transactions = recorded.to_h { |_name, measurements, url| [url && URI(url).path, measurements] }
    PATHS.each do |path|
      assert_equal measurements(timings[path]), transactions.fetch(path) { flunk "no transaction #{path}: #{recorded}" },
                   "#{path}: the transaction's measurements"
    end
  end

  def test_sentry_jobs
    skip_without_redis
    timings, recorded = run_recipe("Sentry", kind: "sidekiq", setup: SENTRY, read_back: SENTRY_READ_BACK)

    jobs = recorded.select { |name, _| name == "Sidekiq/APMRecipeJob" }
    assert_equal all_figures(timings.values.map { |timing| measurements(timing) }), all_figures(jobs.map { |_, measurements, _| measurements }),
                 "each job transaction's measurements are a job's figures: #{recorded}"
  end

  HONEYBADGER = <<~'RUBY'
    honeybadger = HTTPCollector.new
    ENV.update("HONEYBADGER_API_KEY" => "gvlscope-test", "HONEYBADGER_REPORT_DATA" => "true",
               "HONEYBADGER_CONNECTION_HOST" => "127.0.0.1", "HONEYBADGER_CONNECTION_PORT" => honeybadger.port.to_s,
               "HONEYBADGER_CONNECTION_SECURE" => "false", "HONEYBADGER_LOGGING_PATH" => "honeybadger.log")
  RUBY

  # The Insights events Honeybadger sent.
  HONEYBADGER_READ_BACK = <<~'RUBY'
    Honeybadger.flush
    honeybadger.received("/v1/events").flat_map { |request| request.body.split("\n").map { |line| JSON.parse(line) } }
  RUBY

  request_recipe(:honeybadger_insights, "Honeybadger Insights", HONEYBADGER) { HONEYBADGER_READ_BACK }

  def assert_honeybadger_insights(timings, recorded)
    events = recorded.select { |event| event["event_type"] == "gvlscope.request" }
    assert_equal PATHS, events.map { |event| event["path"] }, "an event per request, in order: #{recorded}"
    events.each do |event|
      assert_equal "GET", event["method"]
      assert_equal figures(timings[event["path"]]), event.slice(*FIGURES), "#{event['path']}: the event's figures"
    end
  end

  def test_honeybadger_insights_jobs
    skip_without_redis
    timings, recorded = run_recipe("Honeybadger Insights", kind: "sidekiq", setup: HONEYBADGER, read_back: HONEYBADGER_READ_BACK)

    events = recorded.select { |event| event["event_type"] == "gvlscope.job" }
    assert(events.all? { |event| event["job"] == "APMRecipeJob" && event["queue"] == "default" }, events.inspect)
    assert_equal all_figures(timings.values.map { |timing| figures(timing) }), all_figures(events.map { |event| event.slice(*FIGURES) }),
                 "an event per job, with its figures"
  end

  APPSIGNAL = <<~'RUBY'
    require "appsignal"
    collector = HTTPCollector.new(answer: "", content_type: "application/x-protobuf") # an empty OTLP export response
    ENV.update("APPSIGNAL_PUSH_API_KEY" => "gvlscope-test", "APPSIGNAL_APP_NAME" => "gvlscope-test",
               "APPSIGNAL_APP_ENV" => "test", "APPSIGNAL_ACTIVE" => "true", "APPSIGNAL_LOG_PATH" => Dir.pwd,
               "APPSIGNAL_COLLECTOR_ENDPOINT" => collector.url, "APPSIGNAL_ENABLE_MINUTELY_PROBES" => "false")
    # A real install has the extension; here its download failed as the gem was installed, and
    # Appsignal.start returns early without it ("Not starting AppSignal, extension is not loaded").
    # Collector mode does not use it: spans, metrics and logs go through the OpenTelemetry SDK
    # (Appsignal::Backends), and its remaining calls (start, stop, environment metadata) are no-ops
    # when it is not loaded (Appsignal::Extension.method_missing).
    Appsignal.extension_loaded = true
  RUBY

  # What AppSignal sent its collector: each root span's (a request's, a job's) [name, attributes], and the
  # histogram +metric+'s data points [count, sum, min, max, attributes].
  def appsignal_read_back(metric) = <<~RUBY
    require "opentelemetry/proto/collector/trace/v1/trace_service_pb"
    require "opentelemetry/proto/collector/metrics/v1/metrics_service_pb"
    Appsignal.stop # flushes the OpenTelemetry SDK's spans and metrics
    attribute = ->(value) { value.to_h.values.compact.first }
    traces = collector.received("/v1/traces").map { |request| Opentelemetry::Proto::Collector::Trace::V1::ExportTraceServiceRequest.decode(request.body) }
    spans = traces.flat_map(&:resource_spans).flat_map(&:scope_spans).flat_map(&:spans).reject { |span| span.parent_span_id.bytesize.positive? }
    metrics = collector.received("/v1/metrics").map { |request| Opentelemetry::Proto::Collector::Metrics::V1::ExportMetricsServiceRequest.decode(request.body) }
    points = metrics.flat_map(&:resource_metrics).flat_map(&:scope_metrics).flat_map(&:metrics).select { |m| m.name == #{metric.inspect} }
                    .flat_map { |m| m.histogram.data_points }
    { spans: spans.map { |span| [span.name, span.attributes.to_h { |kv| [kv.key, attribute.(kv.value)] }] },
      points: points.map { |point| [point.count, point.sum, point.min, point.max, point.attributes.to_h { |kv| [kv.key, attribute.(kv.value)] }] } }
  RUBY

  # The recipe's custom data: the request's (job's) figures under "gvlscope", as JSON.
  def appsignal_custom_data(span) = JSON.parse(span.last.fetch("appsignal.custom_data") { flunk "no custom data: #{span}" })["gvlscope"]

  # The histogram's points (delta: one per export, usually the one at Appsignal.stop) together hold
  # a value per request (job).
  def assert_appsignal_distribution(points, waits, attributes = {})
    assert_equal [attributes], points.map(&:last).uniq, "the histogram's tags"
    counts, sums, mins, maxes = points.map { |point| point.first(4) }.transpose
    assert_equal [waits.size, waits.min, waits.max], [counts.sum, mins.min, maxes.max], "a value per request (job): #{points}"
    assert_in_delta waits.sum, sums.sum, 1e-9
  end

  request_recipe(:appsignal, "AppSignal", APPSIGNAL) { appsignal_read_back("gvlscope_gvl_wait_ms") }

  def assert_appsignal(timings, recorded)
    requests = recorded["spans"].to_h { |span| [span.last["url.path"], span] }
    PATHS.each do |path|
      span = requests.fetch(path) { flunk "no span of #{path}: #{recorded['spans']}" }
      assert_equal figures(timings[path]), appsignal_custom_data(span), "#{path}: the request sample's custom data"
    end
    assert_appsignal_distribution(recorded["points"], PATHS.map { |path| timings[path]["wait_ms"] })
  end

  def test_appsignal_jobs
    skip_without_redis
    timings, recorded = run_recipe("AppSignal", kind: "sidekiq", setup: APPSIGNAL, read_back: appsignal_read_back("gvlscope_job_gvl_wait_ms"))

    jobs = recorded["spans"].select { |name, _| name == "APMRecipeJob#perform" }
    assert_equal all_figures(timings.values.map { |timing| figures(timing) }), all_figures(jobs.map { |span| appsignal_custom_data(span) }),
                 "each job sample's custom data are a job's figures: #{recorded['spans']}"
    assert_appsignal_distribution(recorded["points"], timings.values.map { |timing| timing["wait_ms"] }, { "job" => "APMRecipeJob" })
  end
end
