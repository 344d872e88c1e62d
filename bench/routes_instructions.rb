# frozen_string_literal: true

# What GVLScope::Rack's per-route numbers add to a request, in-process, counted by valgrind
# (callgrind): for each setup, a Ruby runs CALLS calls of a hello-world app through it and another
# runs none; the difference over CALLS is the instructions per call (start-up, loading and warm-up
# cancel out). Setups: the bare app; the middleware without per-route numbers (route: false); with
# them on a plain Rack path ("/"), a path with an id ("/users/42", the template is built each time)
# and a Rails request (the router's env keys and a controller set by the app). server_timing: false
# in all, to leave the header's cost out (bench/web_instructions.rb has it).
# SETUPS=handoff_off,handoff: what following a request from the thread that readied it costs
# (Handoffs: the pool's todo list, Native::StampingQueue, stamps each push with its arrival, from the
# kernel's TCP clock, and the thread's GVL wait since; GVLScope::Rack finds the stamp by env["puma.socket"]),
# each call a request of one keep-alive TCP connection handed to the pool, then run: what every
# request under Puma pays; handoff_off does the same without Handoffs. (Instructions in user space:
# the kernel's work for the one getsockopt is not counted; Puma makes the same call per request.)
#
#   bundle exec ruby -Ilib bench/routes_instructions.rb        (CALLS=20000; needs valgrind)
#   SETUPS=bare,no_routes,recorder,header,everything   the rest of the middleware's work (docs/performance.md,
#   "Web"): the flight recorder's per-request checks (its ring running, thresholds never
#   reached), the Server-Timing value formatted and added, and everything on (routes, header, recorder)
#   SETUPS=bare,no_routes,otel_idle,otel_bare,otel_span   OpenTelemetry span attributes (OpenTelemetrySpans):
#   otel_idle is no_routes in a process whose tracing is set up (the SDK, no exporter) with no span current;
#   otel_span calls it inside a span of its own (the SDK's in_span, as an instrumentation's middleware would),
#   otel_bare the bare app inside the same span: otel_span - otel_bare is the middleware with its attributes
#   SETUPS=bare,no_routes,callback_none,callback_one   GVLScope.on_request (docs/apm.md): callback_none is
#   no_routes in a process where a callback was registered and removed again (none left); callback_one
#   with one empty block registered (`GVLScope.on_request { |timing, env| }`): what the call itself costs;
#   yabeda: GVLScope::Yabeda installed, Yabeda configured with yabeda-prometheus' adapter (its histograms observed)
#   SETUPS=newrelic_bare,newrelic_recipe,datadog_bare,datadog_recipe,sentry_bare,sentry_recipe,honeybadger_bare,honeybadger_recipe
#   docs/apm.md's recipes (CALLS=5000 is plenty): each agent set up offline, each call in its transaction as its Rack
#   instrumentation opens it (New Relic's in_transaction, category :web; Datadog's, Sentry's, Honeybadger's middleware)
#   through no_routes; _recipe adds the recipe's on_request block, read from its "### <Agent>" config.ru in docs/apm.md:
#   _recipe - _bare is what the recipe adds to a request, the agent's own work for it included where the agent does it
#   (Datadog's writer encodes all traces at the end and is refused, DogStatsD writes in the request's thread; Sentry's
#   transport encodes and drops; New Relic keeps it for a harvest; Honeybadger's null backend)
require "rbconfig"
require_relative "support/callgrind"

ROOT = File.expand_path("..", __dir__)
CALLS = Integer(ENV.fetch("CALLS", 20_000))

Callgrind.require!

PROGRAM = <<~'RUBY'
  require "gvlscope/rack"
  require "tmpdir"
  require "socket"
  setup, calls = ARGV[0], Integer(ARGV[1])
  WARMUP = 1000 # calls before the counted ones (their work, as start-up's, cancels out)
  hello = ->(_env) { [200, { "content-type" => "text/plain" }, ["ok"]] }
  RECORDER = { dir: Dir.tmpdir, signal: nil, wait_over_ms: 100_000, duration_over_ms: 100_000 }.freeze
  if setup.start_with?("otel")
    ENV["OTEL_TRACES_EXPORTER"] = "none"
    require "opentelemetry/sdk"
    OpenTelemetry::SDK.configure { |c| c.logger = Logger.new(File::NULL) }
    TRACER = OpenTelemetry.tracer_provider.tracer("bench")
  end
  GVLScope.on_request { |_timing, _env| }.then { |callback| callback.remove if setup == "callback_none" } if setup.start_with?("callback")
  if setup == "yabeda"
    require "gvlscope/yabeda"
    require "yabeda/prometheus"
    GVLScope::Yabeda.install!
    Yabeda.configure!
  end
  # The APM agents' setups (newrelic_, datadog_, sentry_, honeybadger_ + bare/recipe): the agent set up offline
  # (nothing reaches a network: its collector a closed loopback port, or its sending off), each call inside the
  # agent's transaction as its Rack instrumentation opens it; _recipe adds docs/apm.md's on_request block (ARGV[2]).
  agent, variant = setup.split("_") if setup.match?(/\A(newrelic|datadog|sentry|honeybadger)_(bare|recipe)\z/)
  closed_port = TCPServer.new("127.0.0.1", 0).then { |server| server.addr[1].tap { server.close } } if agent
  require "rack" if agent # a server has it loaded (the agents' middlewares build Rack::Requests)
  case agent
  when "newrelic" # as apm_recipes_test.rb: its collector refused at once, the data kept for a harvest that never connects
    ENV.update("NEW_RELIC_LICENSE_KEY" => "0" * 40, "NEW_RELIC_APP_NAME" => "gvlscope-bench", "NEW_RELIC_HOST" => "127.0.0.1",
               "NEW_RELIC_PORT" => closed_port.to_s, "NEW_RELIC_SEND_DATA_ON_EXIT" => "false", "NEW_RELIC_LOG_FILE_PATH" => Dir.tmpdir)
    %w[AWS AZURE GCP PCF DOCKER KUBERNETES].each { |vendor| ENV["NEW_RELIC_UTILIZATION_DETECT_#{vendor}"] = "false" }
    require "newrelic_rpm"
    NewRelic::Agent.manual_start
  when "datadog" # the trace agent a closed port (the writer encodes all traces at shutdown!, and is refused); DogStatsD a socket never read.
    # Nothing on a wall-clock timer: under callgrind time runs ~50x slow, so a timed flush lands a varying number of times in a run
    require "datadog"
    require "datadog/statsd"
    dogstatsd = UDPSocket.new.tap { |socket| socket.bind("127.0.0.1", 0) }
    ENV.update("DD_TRACE_AGENT_URL" => "http://127.0.0.1:#{closed_port}", "DD_AGENT_HOST" => "127.0.0.1",
               "DD_DOGSTATSD_PORT" => dogstatsd.addr[1].to_s, "DD_INSTRUMENTATION_TELEMETRY_ENABLED" => "false",
               "DD_REMOTE_CONFIGURATION_ENABLED" => "false", "DD_TRACE_STARTUP_LOGS" => "false", "DD_CRASHTRACKING_ENABLED" => "false")
    Datadog.configure do |c|
      # the refused send's error; INFO as the agent's default (a logger's DEBUG would have it decode each trace again to log it)
      c.logger.instance = Logger.new(File::NULL, level: :info)
      c.tracing.instrument :rack
      c.tracing.writer_options = {
        flush_interval: 86_400, # the writer's flush each second: none in the run, the traces encoded at shutdown! instead
        buffer_size: WARMUP + calls, # every trace kept for it (a full buffer replaces one at random)
        shutdown_timeout: 86_400, # shutdown! waits for that encoding (1 s by default: cut short under callgrind)
      }
    end
    # its datagrams built and buffered in the request's thread (the sender thread's hand-offs vary with scheduling);
    # its own counters' datagrams (every 10 s) never sent in the run: the counting per metric stays
    statsd = Datadog::Statsd.new(single_thread: true, telemetry_flush_interval: 86_400)
    # the writer's thread started now, so its flush at its start finds no trace (started by the first request, it took
    # however many were queued by the time it ran: 38 in one run, 125 in another)
    Datadog.send(:components).tracer.writer.start
    Thread.pass until Thread.list.any? { |thread| thread.name == Datadog::Tracing::Workers::AsyncTransport.name && thread.status == "sleep" }
  when "sentry" # its transport encodes each envelope and drops it; sent from the request's thread (no worker: counted the same each run)
    require "sentry-ruby"
    Sentry.init do |config|
      config.dsn = "http://public@127.0.0.1:#{closed_port}/42"
      config.traces_sample_rate = 1.0
      config.background_worker_threads = 0
      config.transport.transport_class = Class.new(Sentry::Transport) { def send_data(*) = nil }
      config.sdk_logger = Logger.new(File::NULL)
    end
  when "honeybadger" # its events worker batches the events; the null backend sends none
    require "honeybadger"
    Honeybadger.configure do |config|
      config.api_key = "gvlscope-bench"
      config.backend = "null"
      config.logger = Logger.new(File::NULL)
    end
  end
  eval(ARGV.fetch(2), binding, "docs/apm.md") if variant == "recipe" # the doc's block, as written
  controller = Class.new { def self.name = "UsersController"; def action_name = "show" }.new
  rails = lambda do |env|
    env["action_dispatch.request.path_parameters"] = { controller: "users", action: "show", id: "42" }
    env["action_controller.instance"] = controller
    hello.call(env)
  end
  app, path = { "bare" => [hello, "/"], "no_routes" => [GVLScope::Rack.new(hello, server_timing: false, route: false), "/"],
                "route" => [GVLScope::Rack.new(hello, server_timing: false), "/"],
                "route_with_id" => [GVLScope::Rack.new(hello, server_timing: false), "/users/42"],
                "rails_bare" => [rails, "/users/42"],
                "rails_route" => [GVLScope::Rack.new(rails, server_timing: false), "/users/42"],
                "recorder" => [GVLScope::Rack.new(hello, server_timing: false, route: false, flight_recorder: RECORDER), "/"],
                "header" => [GVLScope::Rack.new(hello, route: false), "/"],
                "everything" => [GVLScope::Rack.new(hello, flight_recorder: RECORDER), "/"],
                "callback_none" => [GVLScope::Rack.new(hello, server_timing: false, route: false), "/"],
                "callback_one" => [GVLScope::Rack.new(hello, server_timing: false, route: false), "/"],
                "yabeda" => [GVLScope::Rack.new(hello, server_timing: false, route: false), "/"],
                "handoff" => [GVLScope::Rack.new(hello, server_timing: false, route: false), "/"],
                "handoff_off" => [GVLScope::Rack.new(hello, server_timing: false, route: false), "/"] }.fetch(setup) do
    if setup.start_with?("otel") # built now: the SDK is set up
      [setup == "otel_bare" ? hello : GVLScope::Rack.new(hello, server_timing: false, route: false), "/"]
    elsif agent # the agent's middleware before GVLScope::Rack, as in the recipe's config.ru
      measured = GVLScope::Rack.new(hello, server_timing: false, route: false)
      [{ "datadog" => -> { Datadog::Tracing::Contrib::Rack::TraceMiddleware.new(measured) },
         "sentry" => -> { Sentry::Rack::CaptureExceptions.new(measured) },
         "honeybadger" => -> { Honeybadger::Rack::ErrorNotifier.new(measured) } }.fetch(agent, -> { measured }).call, "/"]
    end
  end
  env = { "REQUEST_METHOD" => "GET", "SCRIPT_NAME" => "", "PATH_INFO" => path, "QUERY_STRING" => "",
          "SERVER_NAME" => "localhost", "SERVER_PORT" => "9292", "rack.url_scheme" => "http" }
  call = -> { app.call(env.dup) }
  call = -> { TRACER.in_span("GET", kind: :server) { app.call(env.dup) } } if %w[otel_bare otel_span].include?(setup)
  # New Relic's Rack instrumentation wraps the app (Rack::Builder's) in a web transaction
  call = -> { NewRelic::Agent::Tracer.in_transaction(name: "Controller/Rack/GET /", category: :web) { app.call(env.dup) } } if agent == "newrelic"
  if setup.start_with?("handoff") # as under Puma: the server thread hands each connection over, then its request runs
    require "gvlscope/integrations/handoffs"
    require "socket"
    pool_class = Class.new do # Puma's ThreadPool's shape: << pushes on its todo list, a pool thread takes it
      def initialize = (@todo = Thread::Queue.new) && (@spawned = 0) && spawn_thread
      def <<(client) = @todo << client
      def take = @todo.shift
      private def spawn_thread = @spawned += 1
    end
    client = Class.new { def initialize(io) = @io = io }.new(nil) # Puma::Client keeps its connection in @io
    if setup == "handoff"
      pool_class.prepend(GVLScope::Handoffs::PumaThreadPool)
      GVLScope::Native.handoff_claim_in_rack = true
    end
    pool = pool_class.new
    listener = TCPServer.new("127.0.0.1", 0)
    peer = TCPSocket.new("127.0.0.1", listener.addr[1])
    env["puma.socket"] = listener.accept
    client.instance_variable_set(:@io, env["puma.socket"])
    peer.write("GET / HTTP/1.1\r\n\r\n") # bytes received: the kernel's arrival
    sleep 0.01 # a block: the thread's wait for the request, whose wake is its arrival
    call = -> { pool << client; pool.take; app.call(env.dup) }
  end
  WARMUP.times { call.call }
  GC.start
  calls.times { call.call }
  # what the agents hold for later is encoded now (the trace writer's, DogStatsD's buffers), in both runs alike: the
  # warm-up's in each, so the calls' encoding is in the difference over CALLS
  Datadog::Tracing.shutdown! if agent == "datadog"
  statsd.close if agent == "datadog"
  Honeybadger.flush if agent == "honeybadger"
RUBY

# An APM setup's on_request block: the one in its docs/apm.md recipe's config.ru, as written there.
def recipe(setup)
  section = { "newrelic" => "New Relic", "datadog" => "Datadog", "sentry" => "Sentry", "honeybadger" => "Honeybadger Insights" }[setup[/\A[a-z]+/]]
  return "" unless section && setup.end_with?("_recipe")

  config_ru = File.read(File.join(ROOT, "docs/apm.md"))[/^### #{section}\n.*?^```ruby config\.ru\n(.*?)^```$/m, 1]
  config_ru[/^GVLScope\.on_request do.*?^end$/m] or abort "docs/apm.md's ### #{section} config.ru has no GVLScope.on_request block"
end

def instructions(setup, calls) = Callgrind.instructions(RbConfig.ruby, "-I", File.join(ROOT, "lib"), "-e", PROGRAM, setup, calls.to_s, recipe(setup))

SETUPS = ENV.fetch("SETUPS", "bare,no_routes,route,route_with_id,rails_bare,rails_route").split(",")
per_call = SETUPS.to_h do |setup|
  [setup, (instructions(setup, CALLS) - instructions(setup, 0)).fdiv(CALLS)]
end
puts "ruby #{RUBY_VERSION}, #{CALLS} calls in-process under callgrind (env.dup per call, as a server's new env)"
puts "| setup | instructions per call | over bare | over no_routes |"
puts "|---|---:|---:|---:|"
per_call.each do |setup, count|
  # handoff's bare is handoff_off: the same connection and env, without Handoffs
  bare = { "rails" => per_call["rails_bare"], "handoff" => per_call["handoff_off"],
           "otel" => setup == "otel_idle" ? per_call["bare"] : per_call["otel_bare"] }.fetch(setup[/\A[a-z]+/], per_call["bare"])
  bare = per_call["#{setup.delete_suffix('_recipe')}_bare"] if setup.end_with?("_recipe") # the agent's, without the block
  bare = nil if setup == "handoff_off"
  puts format("| %s | %.0f | %s | %s |", setup, count, setup.end_with?("bare") || bare.nil? ? "-" : format("%+.0f", count - bare),
              per_call["no_routes"] && %w[route route_with_id recorder header everything otel_idle callback_none callback_one yabeda].include?(setup) ? format("%+.0f", count - per_call["no_routes"]) : "-")
end
