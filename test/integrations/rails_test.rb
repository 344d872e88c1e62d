# frozen_string_literal: true

require "test_helper"
require "json"
require "net/http"
require "tmpdir"
require "timeout"
require_relative "../support/puma_process"

# GVLScope::Rack inside a real Rails app (test/fixtures/rails/config.ru) under real Puma, over
# loopback HTTP, set up as docs/web.md tells Rails users to: outermost in the middleware stack,
# env["gvlscope"] read by a controller and logged through Rails' instrumentation. Rails runs only
# in the Puma child: this process never loads it, so the rest of the suite is unaffected. Every
# wait has a timeout and every server is killed in teardown.
class RailsTest < Minitest::Test
  APP = File.join(GVLScopeTestHelper::ROOT, "test/fixtures/rails/config.ru")
  BOOT_TIMEOUT = 60

  include PumaProcess

  # Rails is in the bundle's test group, so this is only for a run outside the bundle without it.
  def self.rails_load_error
    return @rails_load_error if defined?(@rails_load_error)

    _out, err, status = Open3.capture3(RbConfig.ruby, "-e", 'require "action_controller/railtie"')
    @rails_load_error = status.success? ? nil : err.lines.first.to_s.strip
  end

  def setup
    error = self.class.rails_load_error
    skip "Rails (railties, actionpack) cannot be loaded, so there is no Rails app to test: #{error}" if error
    @dir = Dir.mktmpdir("gvlscope-rails")
    @server = nil
  end

  def teardown
    stop(@server) if @server
    FileUtils.rm_rf(@dir) if @dir
  end

  # Starts Puma on the fixture app in a child Ruby (this checkout's lib, the bundle) and waits
  # until it listens.
  def start_rails(config = "")
    config_path = File.join(@dir, "puma.rb")
    File.write(config_path, <<~RUBY)
      bind "tcp://127.0.0.1:0"
      threads 5, 5
      workers 0
      rackup #{APP.inspect}
      environment "production"
      #{config}
    RUBY
    log_path = File.join(@dir, "puma.log")
    pid = Process.spawn({ "RAILS_ENV" => "production" }, RbConfig.ruby, "-I", File.join(GVLScopeTestHelper::ROOT, "lib"),
                        Gem.bin_path("puma", "puma"), "-C", config_path,
                        out: log_path, err: [:child, :out], pgroup: true)
    @server = Server.new(pid, log_path)
    deadline = clock + BOOT_TIMEOUT
    until (port = @server.log[%r{Listening on http://127\.0\.0\.1:(\d+)}, 1])
      flunk "puma did not listen in #{BOOT_TIMEOUT} s:\n#{@server.log}" if clock > deadline
      flunk "puma exited:\n#{@server.log}" if Process.waitpid(pid, Process::WNOHANG)
      sleep 0.05
    end
    @server.port = Integer(port)
    @server.metrics_port = @server.log[%r{GVL metrics on http://127\.0\.0\.1:(\d+)/metrics}, 1]&.to_i
    @server
  end

  def get(path, port: @server.port)
    response = Net::HTTP.start("127.0.0.1", port, open_timeout: 10, read_timeout: 30) { |http| http.get(path) }
    assert_equal "200", response.code, "GET #{path}:\n#{@server.log}"
    response
  end

  # gvlscope's entries of the Server-Timing header, in ms (idle and gc are left out when zero).
  def gvlscope_timing(response)
    entries = response["server-timing"].split(", ").to_h { |entry| entry.split(";dur=") }
    { "idle" => "0", "gc" => "0" }.merge(entries.slice("gvl-wait", "gvl-run", "idle", "gc"))
                                  .slice("gvl-wait", "gvl-run", "idle", "gc").transform_values { |ms| Float(ms) }
  end

  def test_gvlscope_is_the_outermost_middleware
    start_rails
    stack = JSON.parse(get("/middleware").body)

    assert_equal "GVLScope::Rack", stack["stack"].first, stack.inspect
    assert_equal 1, stack["stack"].count("GVLScope::Rack"), stack.inspect
    # What Puma calls is the built chain; its outermost object is the middleware itself.
    assert_equal "GVLScope::Rack", stack["outermost"]
  end

  def test_server_timing_comes_after_rails_own_entries_and_the_request_log_carries_the_numbers
    start_rails
    response = get("/fast")

    assert_equal "ok", response.body
    header = response["server-timing"]
    # config.server_timing: Rails' ActionDispatch::ServerTiming runs inside ours, so its entries come first.
    assert_match(/\A(?:[\w.]+;dur=[\d.]+, )*process_action\.action_controller;dur=[\d.]+, gvl-wait;dur=[\d.]+, /,
                 header)
    timing = gvlscope_timing(response)
    assert_equal %w[gvl-wait gvl-run idle gc], timing.keys
    assert_operator timing["gvl-run"], :>, 0, header
    # The fixture's ActiveSupport::Notifications subscriber: one line per request in Rails' log.
    assert_match(%r{^gvl GET /fast gvl_wait_ms=[\d.]+ gvl_run_ms=[\d.]+ idle_ms=[\d.]+ gc_ms=[\d.]+ duration_ms=[\d.]+$},
                 @server.log)
  end

  def test_a_controller_reads_the_numbers_so_far_from_env
    start_rails
    get("/fast") # warm up
    seen = JSON.parse(get("/timing?cpu_ms=50").body)

    assert_equal %w[gvl_wait_ms gvl_run_ms idle_ms gc_ms duration_ms], seen.keys
    # The action burned 50 ms of CPU before reading them.
    assert_operator seen["gvl_run_ms"], :>=, 40, seen.inspect
    assert_operator seen["duration_ms"], :>=, seen["gvl_run_ms"] - 1, seen.inspect
  end

  def test_a_quick_request_waits_for_the_gvl_behind_a_cpu_request
    start_rails
    3.times { get("/fast") } # warm up
    alone = Array.new(5) { gvlscope_timing(get("/fast"))["gvl-wait"] }

    # 600 ms of CPU, so that /fast still arrives while it runs when a busy machine is slow to
    # deliver it. Up to a 100 ms timeslice of the wait may fall on Puma's acceptor thread, which
    # belongs to no request yet; only what the thread serving /fast waits after that is counted.
    beside = Array.new(3) do
      cpu = Thread.new { get("/cpu?ms=600") }
      sleep 0.05
      wait = gvlscope_timing(get("/fast"))["gvl-wait"]
      cpu.join(30)
      wait
    end

    warn "alone #{alone.inspect} beside #{beside.inspect}" if ENV["GVLSCOPE_TEST_VERBOSE"]
    # Medians: one request of a few may land on a noisy moment of a shared 2-core machine.
    assert_operator alone.sort[2], :<, 20, "alone: #{alone.inspect}"
    assert_operator beside.sort[1], :>=, 30, "beside /cpu: #{beside.inspect}"
  end

  # The Railtie (loaded by the fixture's `require "gvlscope"`, after Rails): a quick request beside
  # a CPU-bound one has its GVL wait in Rails' `Completed` line and its figures in the action's
  # payload, where a subscriber reads them. They are the request's RequestTiming at the end of the
  # action: the same pickup wait, a wait no larger than the subscriber's reading a moment later,
  # which is no larger than the final one of the Server-Timing header.
  def test_the_railtie_puts_the_gvl_wait_in_the_completed_line_and_the_payload
    start_rails
    3.times { get("/fast") } # warm up
    tries = Array.new(3) do |try|
      cpu = Thread.new { get("/cpu?ms=600") }
      sleep 0.05
      path = "/fast?try=#{try}"
      final = gvlscope_timing(get(path))["gvl-wait"]
      cpu.join(30)
      [path, final]
    end
    log = @server.log

    seen = tries.map do |path, final|
      line = log[/^payload #{Regexp.escape(path)} (.*)$/, 1] or flunk "no payload line for #{path}:\n#{log}"
      figures, now = line.split(" | now ").map { |fields| fields.split.to_h { |field| field.split("=") }.transform_values { Float(_1) } }
      assert_equal %w[gvl_wait_ms gvl_run_ms idle_ms gc_ms duration_ms pickup_wait_ms], figures.keys - ["queue_ms"], line
      assert_equal now["pickup_wait_ms"], figures["pickup_wait_ms"], "the request's pickup wait: #{line}"
      assert_operator figures["pickup_wait_ms"], :<=, figures["gvl_wait_ms"], line
      assert_operator figures["gvl_wait_ms"], :<=, now["gvl_wait_ms"], line
      assert_operator now["gvl_wait_ms"], :<=, final + 0.001, "the header's final wait: #{final} ms; #{line}"
      completed = format("GVL: %.1fms", figures["gvl_wait_ms"])
      assert_match(/^Completed 200 OK in \d+ms \(Views: [\d.]+ms \| #{Regexp.escape(completed)} \| GC: [\d.]+ms\)$/, log, line)
      figures["gvl_wait_ms"]
    end
    warn "payload waits beside /cpu #{seen.inspect}" if ENV["GVLSCOPE_TEST_VERBOSE"]
    # The median: most of the wait is the pickup wait, before the request reached Rails.
    assert_operator seen.sort[1], :>=, 30, "beside /cpu: #{seen.inspect}"
    # A request without env["gvlscope"] (none here) would keep Rails' line as it was: every
    # Completed line of this app has the GVL.
    assert(log.lines.grep(/^Completed /).all? { |completed| completed.include?("| GVL: ") }, log)
  end

  # `require "gvlscope"` loads the Railtie only where Rails is loaded, and never loads Rails or
  # OpenTelemetry itself.
  def test_require_gvlscope_loads_the_railtie_only_with_rails
    code = <<~'RUBY'
      require "gvlscope"
      without = [defined?(::Rails).inspect, defined?(GVLScope::Railtie).inspect, defined?(::OpenTelemetry).inspect,
                 $LOADED_FEATURES.grep(%r{/(railtie|open_telemetry_spans)\.rb\z}).size]
      require "action_controller/railtie"
      load File.join($LOAD_PATH.find { |dir| File.exist?(File.join(dir, "gvlscope.rb")) }, "gvlscope.rb")
      puts without.inspect, defined?(GVLScope::Railtie).inspect, (GVLScope::Railtie < Rails::Railtie).inspect
    RUBY
    out, err, status = Open3.capture3(RbConfig.ruby, "-I", File.join(GVLScopeTestHelper::ROOT, "lib"), "-e", code)
    assert status.success?, err
    assert_equal ['["nil", "nil", "nil", 0]', '"constant"', "true"], out.lines.map(&:strip)
  end

  # The plugin's /metrics (single mode) has a series per Rails route, named controller#action:
  # counts exactly the requests made, ids never in a label, a GVL wait histogram in which the
  # request that waited behind /cpu is in a bucket >= 16 ms, and states that add up to the
  # durations plus pickup waits.
  def test_metrics_have_a_gvl_wait_histogram_per_rails_route
    start_rails("plugin :gvlscope\ngvlscope log_interval: 0, prometheus_port: 0")
    refute_nil @server.metrics_port, @server.log
    10.times { get("/fast") }
    (1..4).each { |id| get("/users/#{id}") }
    cpu = Thread.new { get("/cpu?ms=600") }
    sleep 0.05
    beside = gvlscope_timing(get("/fast"))["gvl-wait"]
    cpu.join(30)

    metrics = PrometheusText.parse(get("/metrics", port: @server.metrics_port).body)
    assert_equal "histogram", metrics.types["gvlscope_route_gvl_wait_seconds"]
    rows = ->(name) { metrics.values.select { |n, _, _| n == name }.map { |_, labels, value| [labels, value] } }
    counts = rows.call("gvlscope_route_requests_total").to_h { |labels, value| [labels["route"], value] }
    assert_equal({ "DemoController#fast" => 11, "DemoController#user" => 4, "DemoController#cpu" => 1 }, counts)
    assert(rows.call("gvlscope_route_requests_total").all? { |labels, _| labels["pid"] == @server.pid.to_s })

    fast = ->(name, extra = {}) { rows.call(name).find { |labels, _| labels.except("pid").eql?({ "route" => "DemoController#fast", **extra }) }&.last }
    assert_equal 11, fast.call("gvlscope_route_gvl_wait_seconds_count")
    assert_equal 11, fast.call("gvlscope_route_gvl_wait_seconds_bucket", { "le" => "+Inf" })
    # At most 10 of the 11 waited less than 16.8 ms: the one beside /cpu waited more, if it did.
    below = fast.call("gvlscope_route_gvl_wait_seconds_bucket", { "le" => "0.016777216" })
    assert_operator below, :<=, beside >= 16.8 ? 10 : 11, "beside /cpu: #{beside} ms"
    assert_operator fast.call("gvlscope_route_gvl_wait_seconds_sum"), :>=, beside / 1000 - 1e-6

    parts = %w[run wait idle gc].sum { |state| fast.call("gvlscope_route_seconds_total", { "state" => state }) }
    whole = fast.call("gvlscope_route_duration_seconds_total") + fast.call("gvlscope_route_pickup_wait_seconds_total")
    assert_in_delta whole, parts, 1e-6, "9 significant digits of each number"
    assert_operator beside, :>=, 30, "the quick request waited behind /cpu (#{beside} ms)"
  end
end
