# frozen_string_literal: true

require "test_helper"
require "logger"
require "stringio"
require "rack"
require "rack/lint"
require "rack/mock_request"
require "gvlscope/rack"

# GVLScope.on_request / on_job in-process (callbacks_servers_test.rb has them under real Puma,
# Falcon and Sidekiq): when they are called, with what, how a failing one is warned about, and
# that none registered leaves GVLScope::Rack's request to C alone.
class CallbacksTest < Minitest::Test
  OK = [200, { "content-type" => "text/plain" }.freeze, ["ok"].freeze].freeze
  HELLO = ->(_env) { [200, { "content-type" => "text/plain" }, ["ok"]] }

  def teardown
    GVLScope::Callbacks.clear
    GVLScope::Metrics.disable if GVLScope::Metrics.enabled?
  end

  def request(middleware, path = "/")
    Rack::MockRequest.new(Rack::Lint.new(middleware)).get(path)
  end

  def test_a_request_callback_gets_the_finished_timing_and_env_once_per_request
    calls = []
    GVLScope.on_request { |timing, env| calls << [timing, env, timing.finished?, timing.server_timing] }
    middleware = GVLScope::Rack.new(HELLO)
    responses = Array.new(3) { |i| request(middleware, "/#{i}") }

    assert_equal 3, calls.size
    assert_equal ["/0", "/1", "/2"], calls.map { |_, env, _| env["PATH_INFO"] }
    calls.zip(responses).each do |(timing, env, finished, server_timing), response|
      assert finished, "the timing was not finished when the callback ran"
      assert_same env["gvlscope"], timing
      assert_equal response.headers["server-timing"], server_timing, "the callback saw the header's figures"
    end
    assert_equal 3, calls.map(&:first).uniq(&:object_id).size
  end

  def test_a_request_whose_app_raised_is_still_given_to_the_callbacks_once
    calls = []
    GVLScope.on_request { |timing, env| calls << [timing.finished?, env["PATH_INFO"]] }
    middleware = GVLScope::Rack.new(->(_env) { raise IOError, "app failed" })
    error = assert_raises(IOError) { middleware.call(Rack::MockRequest.env_for("/boom")) }

    assert_equal "app failed", error.message
    assert_equal [[true, "/boom"]], calls
  end

  def test_a_raising_callback_is_warned_about_once_and_the_others_still_run
    log = StringIO.new
    seen = []
    GVLScope.on_request { |_timing, env| seen << [:before, env["PATH_INFO"]] }
    failing = GVLScope.on_request { |_timing, env| raise ArgumentError, "no #{env['PATH_INFO']}" }
    GVLScope.on_request { |_timing, env| seen << [:after, env["PATH_INFO"]] }
    middleware = GVLScope::Rack.new(HELLO, logger: Logger.new(log))
    responses = %w[/a /b /c].map { |path| request(middleware, path) }

    assert_equal [200] * 3, responses.map(&:status)
    assert_equal ["ok"] * 3, responses.map(&:body)
    assert_equal %w[/a /b /c].flat_map { |path| [[:before, path], [:after, path]] }, seen
    lines = log.string.lines.grep(/gvlscope/)
    assert_equal 1, lines.size, log.string
    assert_match(/the on_request callback at #{Regexp.escape(__FILE__)}:\d+ raised ArgumentError: no \/a \(said once for this callback; it is still called\)/,
                 lines.first)
    assert failing.remove
    refute failing.remove, "a second remove finds nothing"
  end

  def test_a_callback_failing_without_a_logger_warns_through_kernel_warn
    GVLScope.on_request { |_timing, _env| raise "boom" }
    middleware = GVLScope::Rack.new(HELLO)
    _out, err = capture_io { 2.times { request(middleware) } }

    assert_equal 1, err.lines.size, err
    assert_match(/\Agvlscope: the on_request callback at .+ raised RuntimeError: boom/, err)
  end

  def test_removed_callbacks_are_not_called_and_none_leaves_the_request_to_c
    calls = 0
    callback = GVLScope.on_request { |_timing, _env| calls += 1 }
    middleware = GVLScope::Rack.new(HELLO, route: false)
    requests = middleware.instance_variable_get(:@requests)
    env = Rack::MockRequest.env_for("/")
    timing = requests.start(env)
    assert_nil requests.finish(timing, env, HELLO.call(env)), "with a callback C leaves the request to Ruby"
    request(middleware)
    assert_equal 1, calls

    callback.remove
    request(middleware)
    assert_equal 1, calls
    env = Rack::MockRequest.env_for("/")
    timing = requests.start(env)
    response = HELLO.call(env)
    assert_same response, requests.finish(timing, env, response), "with none C finishes the request alone"
  end

  def test_on_request_and_on_job_need_a_block
    error = assert_raises(ArgumentError) { GVLScope.on_request }
    assert_equal "GVLScope.on_request needs a block: GVLScope.on_request { |timing, env| ... }", error.message
    error = assert_raises(ArgumentError) { GVLScope.on_job }
    assert_equal "GVLScope.on_job needs a block: GVLScope.on_job { |timing, job| ... }", error.message
  end

  def test_measure_job_gives_its_jobs_to_the_job_callbacks
    GVLScope::Metrics.enable
    calls = []
    GVLScope.on_job { |timing, job| calls << [timing, job, timing.finished?] }
    GVLScope.on_request { |_timing, _env| flunk "a job is no request" }
    reader, writer = IO.pipe
    first = GVLScope::EventLoops.measure_job(reader, "MailJob", { queue: "mail" }.freeze) { :done }
    payload = { "class" => "MailJob", "jid" => "j1" }
    second = GVLScope::EventLoops.measure_job(reader, "MailJob", job: payload) { :done }
    assert_raises(IOError) { GVLScope::EventLoops.measure_job(reader, "FailJob") { raise IOError } }

    assert_equal 3, calls.size
    assert_same first, calls[0][0]
    assert_equal({ "class" => "MailJob", "queue" => "mail" }, calls[0][1])
    assert_same second, calls[1][0]
    assert_same payload, calls[1][1]
    assert_equal({ "class" => "FailJob" }, calls[2][1])
    assert calls.all? { |_, _, finished| finished }
  ensure
    reader&.close
    writer&.close
  end
end
