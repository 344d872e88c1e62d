# frozen_string_literal: true

require "test_helper"
require "stringio"
require "rack"
require "rack/mock_request"
require "sinatra/base"
require "gvlscope/rack"

# GVLScope::Rack's per-route numbers in-process: the labels (Sinatra's own patterns, Rails' path
# parameters, the id-free path template), the cap, the route function, sampling, and sums that
# add up to the requests' durations. Rails under Puma: test/integrations/rails_test.rb.
class RoutesTest < Minitest::Test
  class Users < Sinatra::Base
    set :host_authorization, { permitted_hosts: [] }
    get("/users/:id") { "user #{params[:id]}" }
    get("/users/:id/posts/:post") { "post" }
  end

  def setup = GVLScope::Breakdown.reset!

  def teardown
    GVLScope::Breakdown.reset!
    GVLScope::Metrics.disable if GVLScope::Metrics.enabled?
  end

  def routes = GVLScope::Breakdown.snapshot.select { |e| e.kind == :route }.to_h { |e| [e.label, e] }

  def env_for(path, method: "GET") = Rack::MockRequest.env_for(path, method: method)

  OK = ->(_env) { [200, {}, ["ok"]] }

  def test_a_path_template_never_holds_an_id
    cases = {
      "/" => "GET /",
      "/users" => "GET /users",
      "/users/42" => "GET /users/:id",
      "/users/42/posts/7.json" => "GET /users/:id/posts/:id.json",
      "/posts/42-my-first-post" => "GET /posts/:id",
      "/orders/0b6f37e2-3f0a-4c43-9d7e-5d3a1c9b2e11/items" => "GET /orders/:id/items",
      "/objects/5f2b3c4d5e6f7a8b9c0d1e2f" => "GET /objects/:id",
      "/commits/deadbeef1" => "GET /commits/:id",
      "/invoices/INV-2024-0001" => "GET /invoices/:id",
      "/reset/a8Hk2LmQ9pRz4TnW7x" => "GET /reset/:id",
      "/api/v1/users" => "GET /api/v1/users",            # v1 is no id
      "/blog/deadbeef" => "GET /blog/deadbeef",          # hex letters alone are a word
      "/.well-known/security.txt" => "GET /.well-known/security.txt",
      "/files/report.pdf" => "GET /files/report.pdf",
    }
    middleware = GVLScope::Rack.new(OK, route: true)
    cases.each_key { |path| middleware.call(env_for(path)) }
    middleware.call(env_for("/users/43"))
    middleware.call(env_for("/users/42", method: "DELETE"))
    middleware.call(env_for("", method: "GET").merge("PATH_INFO" => ""))
    GVLScope::Rack.new(->(_env) { [404, {}, ["no"]] }, route: true).call(env_for("/wp-admin/setup-config.php"))

    labels = routes
    cases.each { |path, label| assert labels.key?(label), "#{path}: #{label} missing from #{labels.keys}" }
    assert_equal 2, labels["GET /users/:id"].count
    assert_equal 2, labels["GET /"].count
    assert_equal 1, labels["DELETE /users/:id"].count
    assert_equal 1, labels["GET (not found)"].count
    refute(labels.keys.any? { |label| label.match?(/\d{2}/) && !label.include?("v1") }, labels.keys.inspect)
  end

  # Any client chooses the path and the method: neither may make a label (or a table) without end.
  def test_long_paths_and_unknown_methods_make_bounded_labels
    max = GVLScope::RouteLabel::MAX_LABEL_BYTES
    middleware = GVLScope::Rack.new(OK, route: true)
    middleware.call(env_for("/#{'a' * 3000}"))       # no id: a label of its own, cut
    middleware.call(env_for("/#{'b' * 800}/42"))     # an id: the template, cut
    middleware.call(env_for("/").merge("PATH_INFO" => "/x#{"\u00e9" * 1500}")) # cut inside a character
    5.times { |i| middleware.call(env_for("/users", method: "X-METHOD-#{i}")) }
    middleware.call(env_for("/users", method: "PATCH"))

    labels = routes.keys
    long = labels.select { |label| label.end_with?("...") }
    assert_equal 3, long.size, labels.inspect
    long.each do |label|
      assert_operator label.bytesize, :<=, max
      assert_predicate label, :valid_encoding?
    end
    assert_includes labels, "GET /#{'a' * (max - 8)}..."
    assert_equal 5, routes.fetch("OTHER /users").count
    assert_includes labels, "PATCH /users"
    paths = GVLScope::RouteLabel.new.tap { |label| 1000.times { |i| label.call(env_for("/x", method: "M#{i}"), 200) } }
                                .instance_variable_get(:@paths)
    assert_equal ["OTHER"], paths.keys
  end

  def test_sinatra_routes_are_their_patterns
    middleware = GVLScope::Rack.new(Users, route: true)
    %w[/users/1 /users/2 /users/3/posts/9].each do |path|
      status, = middleware.call(env_for(path))
      assert_equal 200, status
    end
    assert_equal({ "GET /users/:id" => 2, "GET /users/:id/posts/:post" => 1 }, routes.transform_values(&:count))
  end

  # Rails' router leaves the route in env; a controller instance names its class (test/integrations/rails_test.rb
  # checks both under Puma). Here the env keys alone, as Rails sets them.
  def test_rails_routes_are_controller_and_action
    controller = Struct.new(:action_name)
    stub_const = Class.new(controller) { def self.name = "Admin::UsersController" }
    with_controller = lambda do |env|
      env["action_dispatch.request.path_parameters"] = { controller: "admin/users", action: "show", id: "1" }
      env["action_controller.instance"] = stub_const.new("show")
      [200, {}, ["ok"]]
    end
    routed_only = lambda do |env|
      env["action_dispatch.request.path_parameters"] = { controller: "admin/user_profiles", action: "index", id: "7" }
      [200, {}, ["ok"]]
    end
    2.times { GVLScope::Rack.new(with_controller, route: true).call(env_for("/admin/users/1")) }
    GVLScope::Rack.new(routed_only, route: true).call(env_for("/admin/user_profiles"))
    assert_equal({ "Admin::UsersController#show" => 2, "Admin::UserProfilesController#index" => 1 },
                 routes.transform_values(&:count))
  end

  def test_past_max_routes_the_rest_are_other
    middleware = GVLScope::Rack.new(OK, max_routes: 3, route: true)
    %w[/a /b /c /d /e /a /f].each { |path| middleware.call(env_for(path)) }
    assert_equal({ "GET /a" => 2, "GET /b" => 1, "GET /c" => 1, "other" => 3 }, routes.transform_values(&:count))
    assert_raises(GVLScope::Error) { GVLScope::Rack.new(OK, max_routes: -1) }
  end

  # A route function that raises costs a warning a minute, never the response.
  def test_a_route_function_names_routes_and_one_that_raises_is_warned_about
    log = StringIO.new
    logger = Logger.new(log)
    named = GVLScope::Rack.new(OK, route: ->(env) { env["PATH_INFO"].start_with?("/admin") ? "admin" : nil })
    named.call(env_for("/admin/x"))
    named.call(env_for("/home"))
    broken = GVLScope::Rack.new(OK, route: ->(_env) { raise KeyError, "no route" }, logger: logger)
    responses = Array.new(5) { broken.call(env_for("/users/5")) }

    assert_equal [[200, {}, ["ok"]]] * 5, responses.map { |status, headers, body| [status, headers.except("server-timing"), body] }
    assert_equal({ "admin" => 1, "GET /home" => 1, "GET /users/:id" => 5 }, routes.transform_values(&:count))
    lines = log.string.lines.grep(/gvlscope/)
    assert_equal 1, lines.size, log.string
    assert_match(/route function raised KeyError: no route; the built-in route is used/, lines.first)

    GVLScope::Breakdown.reset!
    GVLScope::Rack.new(OK, route: false).call(env_for("/x"))
    assert_empty routes
    assert_raises(GVLScope::Error) { GVLScope::Rack.new(OK, route: "users#show") }
  end

  # Without a route option, per-route numbers are off (they fit the web budget on no Ruby beside
  # the hand-off's cost); route: true turns them on.
  def test_per_route_numbers_only_when_asked_for
    refute GVLScope::Rack::ROUTES_BY_DEFAULT
    middleware = GVLScope::Rack.new(OK)
    2.times { middleware.call(env_for("/users/7")) }
    assert_empty routes
    asked = GVLScope::Rack.new(OK, route: true)
    2.times { asked.call(env_for("/users/7")) } # the second one through the C table
    assert_equal({ "GET /users/:id" => 2 }, routes.transform_values(&:count))
    env = env_for("/users/8")
    middleware.call(env)
    assert_predicate env["gvlscope"], :finished?, "the request is measured either way"
  end

  # Both sides come from the same two clock readings per request (RequestTiming reads the thread's
  # counters at the instants it reads the clock): the thread's time between them is split among
  # run, wait, idle and GC, so the parts add up to the duration (plus the pickup wait before it)
  # to the ns, request by request and so per route.
  def test_the_parts_of_a_route_add_up_to_its_requests_durations
    app = lambda do |env|
      case env["PATH_INFO"]
      when "/sleep" then sleep 0.003
      when "/gc" then GC.start
      when "/cpu" then 20_000.times.map(&:to_s)
      end
      [200, {}, ["ok"]]
    end
    middleware = GVLScope::Rack.new(app, route: true)
    hog = Thread.new { 3.times { 100_000.times.map(&:to_s) } } # waits, for some requests
    durations = Hash.new(0)
    60.times do |i|
      env = env_for(%w[/sleep /gc /cpu][i % 3])
      middleware.call(env)
      durations[env["PATH_INFO"]] += env["gvlscope"].duration_ns + env["gvlscope"].pickup_wait_ns
    end
    hog.join

    %w[/sleep /gc /cpu].each do |path|
      e = routes.fetch("GET #{path}")
      assert_equal 20, e.count
      parts = e.run_ns + e.wait_ns + e.idle_ns + e.gc_ns
      assert_equal durations[path], e.duration_ns + e.pickup_wait_ns, path
      assert_equal e.duration_ns + e.pickup_wait_ns, parts, path
    end
    assert_operator routes["GET /gc"].gc_ns, :>, 0
    assert_operator routes["GET /sleep"].idle_ns, :>=, 20 * 3_000_000
  end

  # sample: 0.25 measures the requests for which Kernel#rand < 0.25: with a seed, exactly those.
  # The process-wide metrics still count every request.
  def test_sampling_measures_the_sampled_share_and_metrics_stay_exact
    middleware = GVLScope::Rack.new(->(env) { [200, {}, [env.key?("gvlscope") ? "measured" : "passed"]] }, sample: 0.25, route: true)
    srand(20_261_123)
    bodies = Array.new(4000) { middleware.call(env_for("/x"))[2].first }
    srand(20_261_123)
    expected = Array.new(4000) { rand < 0.25 }
    assert_equal expected.map { |sampled| sampled ? "measured" : "passed" }, bodies
    assert_equal expected.count(true), routes["GET /x"].count
    assert_in_delta 1000, routes["GET /x"].count, 120 # binomial: sd 27, so 4.4 sd
    assert_equal 0.25, routes["GET /x"].sample_rate

    none = GVLScope::Rack.new(->(_env) { sleep 0.02; [200, {}, ["ok"]] }, sample: 0.0, route: true)
    before = GVLScope::Metrics.current_thread
    env = env_for("/none")
    _status, headers, = none.call(env)
    after = GVLScope::Metrics.current_thread
    refute env.key?("gvlscope")
    refute headers.key?("server-timing")
    refute routes.key?("GET /none")
    assert_operator after.idle_ns - before.idle_ns, :>=, 20_000_000, "the metrics saw the unsampled request"

    [-0.1, 1.5, "all"].each do |bad|
      error = assert_raises(GVLScope::Error) { GVLScope::Rack.new(OK, sample: bad) }
      assert_match(/sample must be a number in 0\.0\.\.1\.0, got #{Regexp.escape(bad.inspect)}/, error.message)
    end
  end

  def test_a_request_that_raises_is_counted_under_its_route
    middleware = GVLScope::Rack.new(->(_env) { raise ArgumentError, "boom" }, route: true)
    assert_raises(ArgumentError) { middleware.call(env_for("/boom/12")) }
    assert_equal 1, routes["GET /boom/:id"].count
  end

  # A route seen before is recorded in C (Native::RackRequests, keyed as RouteLabel names it): the
  # same labels and counts as Ruby's for every kind of request, each label's series followed
  # across Breakdown.reset! and a new cap (which make new series).
  def test_routes_seen_before_count_as_the_first_request_named_them
    show = Class.new(Struct.new(:action_name)) { def self.name = "UsersController" }
    other = Class.new(Struct.new(:action_name)) { def self.name = "PostsController" }
    app = lambda do |env|
      case env["PATH_INFO"]
      when %r{\A/rails/(\w+)/(\w+)} # the router's keys, and a controller for some
        env["action_dispatch.request.path_parameters"] = { controller: Regexp.last_match(1), action: Regexp.last_match(2) }
        env["action_controller.instance"] = { "users" => show, "posts" => other }[Regexp.last_match(1)]&.new(Regexp.last_match(2))
      when %r{\A/sinatra/} then env["sinatra.route"] = "GET /sinatra/:name"
      when "/missing" then return [404, {}, ["no"]]
      end
      [200, {}, ["ok"]]
    end
    middleware = GVLScope::Rack.new(app, route: true)
    requests = { "/users/42" => "GET /app/users/:id", "/users/43" => "GET /app/users/:id", "/" => "GET /app/",
                 "/missing" => "GET (not found)", "/sinatra/a" => "GET /sinatra/:name", "/sinatra/b" => "GET /sinatra/:name",
                 "/rails/users/show" => "UsersController#show", "/rails/users/edit" => "UsersController#edit",
                 "/rails/posts/show" => "PostsController#show", "/rails/admin_reports/index" => "AdminReportsController#index",
                 "/caf\u00e9" => "GET /app/caf\u00e9" }
    expected = Hash.new(0)
    3.times do
      requests.each do |path, label|
        middleware.call(env_for("/").merge("SCRIPT_NAME" => "/app", "PATH_INFO" => path))
        expected[label] += 1
      end
    end
    assert_equal expected, routes.transform_values(&:count)

    GVLScope::Breakdown.reset! # the table's series are gone with it
    2.times { middleware.call(env_for("/app/users/7").merge("SCRIPT_NAME" => "/app", "PATH_INFO" => "/users/7")) }
    assert_equal({ "GET /app/users/:id" => 2 }, routes.transform_values(&:count))

    GVLScope::Breakdown.reset!
    GVLScope::Breakdown.configure(max_routes: 1)
    %w[/a /b /b].each { |path| middleware.call(env_for(path)) }
    GVLScope::Breakdown.configure(max_routes: 10) # "/b" was "other"; now it can be itself
    middleware.call(env_for("/b"))
    assert_equal({ "GET /a" => 1, "other" => 2, "GET /b" => 1 }, routes.transform_values(&:count))
  end

  # A controller whose action_name raises: the request is not counted, a warning says why, and the
  # response goes out, every time.
  def test_a_controller_that_fails_to_name_its_action_is_warned_about
    broken = Class.new { def action_name = raise(NameError, "no action") }
    app = lambda do |env|
      env["action_dispatch.request.path_parameters"] = { controller: "users", action: "show" }
      env["action_controller.instance"] = broken.new
      [200, {}, ["ok"]]
    end
    log = StringIO.new
    middleware = GVLScope::Rack.new(app, logger: Logger.new(log), route: true)
    middleware.call(env_for("/users/1")) # a route first named in Ruby: the table keys Rails' requests from now on
    statuses = Array.new(3) { middleware.call(env_for("/users/1")).first }
    assert_equal [200] * 3, statuses
    assert_empty routes
    assert_match(/could not count a request by route: NameError: no action/, log.string)
  end
end
