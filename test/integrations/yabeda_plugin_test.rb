# frozen_string_literal: true

require "test_helper"
require "rack"
require "rack/mock_request"
require "gvlscope/rack"
require "gvlscope/yabeda"

# GVLScope::Yabeda in-process, with Yabeda and no adapter (each metric keeps its last value per
# tags): what each request and job is measured as, the route tag's options and the install's
# checks. yabeda_test.rb has the whole path to a real Prometheus server.
class YabedaPluginTest < Minitest::Test
  HELLO = ->(_env) { [200, { "content-type" => "text/plain" }, ["ok"]] }

  def setup
    Yabeda.configure! unless Yabeda.configured?
  end

  def teardown
    GVLScope::Yabeda.uninstall!
    GVLScope::Callbacks.clear
    GVLScope::Metrics.disable if GVLScope::Metrics.enabled?
  end

  def last(metric, tags) = Yabeda.metrics.fetch("gvlscope_#{metric}").values.fetch(tags)

  def test_each_request_and_job_is_measured_with_its_timings_figures
    assert GVLScope::Yabeda.install!
    refute GVLScope::Yabeda.install!, "a second install! does nothing"
    timings = []
    GVLScope.on_request { |timing, _env| timings << timing }
    Rack::MockRequest.new(GVLScope::Rack.new(HELLO)).get("/orders/42")
    timing = timings.fetch(0)
    tags = { route: "GET /orders/:id" }
    { web_request_gvl_wait: timing.wait_ns, web_request_run: timing.run_ns, web_request_idle: timing.idle_ns,
      web_request_gc: timing.gc_ns }.each { |metric, ns| assert_equal ns / 1e9, last(metric, tags), metric }

    reader, writer = IO.pipe
    job = GVLScope::EventLoops.measure_job(reader, "MailJob", { queue: "mail" }.freeze, enqueued_at: (Time.now.to_f * 1000).floor - 20) { sleep 0.001 }
    tags = { job_class: "MailJob", queue: "mail" }
    assert_equal job.run_ns / 1e9, last(:background_job_run, tags)
    assert_equal job.idle_ns / 1e9, last(:background_job_idle, tags)
    assert_equal job.queue_latency_ns / 1e9, last(:background_job_queue_latency, tags)
  ensure
    reader&.close
    writer&.close
  end

  def test_routes_past_max_routes_are_other_and_a_route_function_names_them
    GVLScope::Yabeda.install!(max_routes: 1)
    middleware = Rack::MockRequest.new(GVLScope::Rack.new(HELLO))
    middleware.get("/first")
    middleware.get("/second")
    metric = Yabeda.metrics.fetch("gvlscope_web_request_run")
    assert metric.values.key?({ route: "GET /first" })
    assert metric.values.key?({ route: "other" })
    refute metric.values.key?({ route: "GET /second" })

    GVLScope::Yabeda.uninstall!
    GVLScope::Yabeda.install!(route: ->(env) { "mine #{env['PATH_INFO']}" })
    middleware.get("/third")
    assert metric.values.key?({ route: "mine /third" })
  end

  def test_bad_options_are_one_clear_error
    error = assert_raises(GVLScope::Error) { GVLScope::Yabeda.install!(route: "yes") }
    assert_equal 'GVLScope::Yabeda: route must be true, false or respond to call(env) (a Proc), got "yes"', error.message
    error = assert_raises(GVLScope::Error) { GVLScope::Yabeda.install!(max_routes: 0) }
    assert_equal "GVLScope::Yabeda: max_routes must be an Integer >= 1, got 0", error.message
    refute GVLScope::Yabeda.installed?
  end
end
