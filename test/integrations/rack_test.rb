# frozen_string_literal: true

require "test_helper"
require "tmpdir"
require "logger"
require "stringio"
require "rack"
require "rack/lint"
require "rack/mock_request"
require "gvlscope/rack"

# The middleware in-process, with fake apps: what it measures, what it adds to the response, and
# that bad options fail when the app is built.
class RackTest < Minitest::Test
  def teardown
    GVLScope::FlightRecorder.stop if GVLScope::FlightRecorder.running?
    GVLScope::Metrics.disable if GVLScope::Metrics.enabled?
  end

  def clock = Process.clock_gettime(Process::CLOCK_MONOTONIC)

  def burn(seconds)
    deadline = clock + seconds
    x = 0
    x += 1 while clock < deadline
  end

  # A thread that holds the GVL timeslice after timeslice until it is killed, returned once it runs
  # (on a loaded machine a fixed sleep does not say it has begun, nor that it has not ended).
  def start_hog
    started = Queue.new
    hog = Thread.new do
      started << true
      x = 0
      loop { x += 1 }
    end
    started.pop
    hog
  end

  # gvlscope's entries in ms; idle and gc are left out of the header when zero.
  def server_timing(response)
    entries = response.headers["server-timing"].split(", ").to_h do |metric|
      name, dur = metric.split(";dur=")
      [name, Float(dur)]
    end
    %w[gvl-wait gvl-run idle gc].to_h { |name| [name, entries.fetch(name, 0.0)] }.merge(entries)
  end

  def request(middleware, path = "/")
    Rack::MockRequest.new(Rack::Lint.new(middleware)).get(path)
  end

  def test_server_timing_splits_the_request_into_run_wait_idle_and_gc
    app = lambda do |env|
      env["PATH_INFO"] == "/sleep" ? sleep(0.1) : burn(0.1)
      [200, { "content-type" => "text/plain" }, ["ok"]]
    end
    middleware = GVLScope::Rack.new(app)

    cpu = server_timing(request(middleware, "/cpu"))
    assert_operator cpu["gvl-run"], :>=, 80, cpu.inspect
    assert_operator cpu["idle"], :<, 20, cpu.inspect
    assert_equal %w[gvl-wait gvl-run idle gc], cpu.keys

    sleeper = server_timing(request(middleware, "/sleep"))
    assert_operator sleeper["idle"], :>=, 95, sleeper.inspect
    assert_operator sleeper["gvl-run"], :<, 20, sleeper.inspect
  end

  # Another thread burning CPU holds the GVL for whole timeslices: the request waits for it.
  def test_a_request_beside_a_cpu_thread_waits_for_the_gvl
    app = lambda do |_env|
      5.times { sleep 0.001 } # each wake-up needs the GVL back
      [200, {}, ["ok"]]
    end
    middleware = GVLScope::Rack.new(app)
    alone = server_timing(request(middleware))
    hog = start_hog
    beside = server_timing(request(middleware))
    hog.kill.join

    assert_operator alone["gvl-wait"], :<, 20, alone.inspect
    assert_operator beside["gvl-wait"], :>=, 50, beside.inspect
  end

  # The pickup wait is what the thread waited since its previous request and since it last came
  # back from idle (a server thread woken for the request). A thread that, between two requests,
  # waited beside a CPU hog and then slept does not bring that wait into the next request: the
  # suite's main thread is such a thread, which once reported 413 ms of wait for a 13 ms request.
  def test_wait_between_requests_before_an_idle_is_not_the_next_requests_pickup
    app = ->(_env) { [200, {}, ["ok"]] }
    middleware = GVLScope::Rack.new(app)
    request(middleware) # the thread's previous request: from here its pickup wait is known
    hog = start_hog
    before = GVLScope::Metrics.current_thread.wait_ns
    5.times { sleep 0.001 } # each wake-up waits for the hog's timeslice
    waited_ms = (GVLScope::Metrics.current_thread.wait_ns - before) / 1e6
    hog.kill.join
    sleep 0.01 # idle: what comes after is the next request's pickup
    after = server_timing(request(middleware))

    assert_operator waited_ms, :>=, 50, "the wait between the requests"
    assert_operator after["gvl-wait"], :<, 20, after.inspect
  end

  # A thread's first request has no previous one: its pickup is the wait since it last came back
  # from idle, as a Puma pool thread woken for its first request waits for the GVL before it can
  # parse it. Each try is a new thread whose wake-up from sleep lands in a hog's timeslice.
  def test_a_threads_first_request_brings_the_wait_since_it_woke
    app = ->(_env) { [200, {}, ["ok"]] }
    middleware = GVLScope::Rack.new(app)
    GVLScope::Metrics.enable
    hog = start_hog
    tries = []
    5.times do
      tries << Thread.new do
        before_sleep_ns = GVLScope::Metrics.current_thread.wait_ns # what it waited to start
        sleep 0.001 # idle: the wake-up waits for the GVL behind the hog
        woke_waited_ns = GVLScope::Metrics.current_thread.wait_ns - before_sleep_ns
        env = Rack::MockRequest.env_for("/")
        middleware.call(env)
        [woke_waited_ns, env["gvlscope"].pickup_wait_ns]
      end.value
      break if tries.last[0] >= 10_000_000
    end
    hog.kill
    woke_waited_ns, pickup_ns = tries.last

    assert_operator woke_waited_ns, :>=, 10_000_000, "no try woke inside the hog's timeslice: #{tries.inspect}"
    # Everything waited since the wake, and at most the wait between the reading and the start.
    assert_operator pickup_ns, :>=, woke_waited_ns, tries.inspect
    assert_operator pickup_ns - woke_waited_ns, :<, 5_000_000, tries.inspect
  end
  def test_env_holds_the_timing_for_loggers_and_numbers_so_far_inside_the_app
    seen_inside = nil
    app = lambda do |env|
      burn(0.05)
      seen_inside = env["gvlscope"].run_ms
      [200, {}, ["ok"]]
    end
    env = Rack::MockRequest.env_for("/")
    GVLScope::Rack.new(app).call(env)
    timing = env["gvlscope"]

    assert timing.finished?
    assert_operator seen_inside, :>=, 40
    assert_operator timing.run_ms, :>=, seen_inside
    assert_equal %i[gvl_wait_ms gvl_run_ms idle_ms gc_ms duration_ms], timing.to_h.keys
    in_call_ms = timing.run_ms + timing.wait_ms - timing.pickup_wait_ms + timing.idle_ms
    assert_operator timing.duration_ms, :>=, in_call_ms - 1
  end

  # The header's numbers are the timing's own, in ms rounded to the microsecond (formatted in C),
  # as short as they can be written: no trailing zeros, idle and gc only when not zero.
  def test_server_timing_is_the_timing_in_milliseconds_to_the_microsecond
    GVLScope::Metrics.enable
    timing = GVLScope::RequestTiming.new
    sleep 0.0123
    burn(0.004)
    timing.finish!
    assert_predicate timing, :finished?
    fields = timing.server_timing.split(", ").to_h { |metric| metric.split(";dur=") }
    expected = { "gvl-wait" => timing.wait_ns, "gvl-run" => timing.run_ns, "idle" => timing.idle_ns, "gc" => timing.gc_ns }
    expected.reject! { |name, ns| %w[idle gc].include?(name) && (ns + 500) / 1000 == 0 }
    assert_equal expected.keys, fields.keys
    fields.each_value { |value| assert_match(/\A\d+(\.\d{0,2}[1-9])?\z/, value) }
    expected.each do |name, ns|
      assert_equal format("%.3f", ((ns + 500) / 1000) / 1000.0).sub(/\.?0+\z/, ""), fields[name], name
    end
    assert_operator timing.idle_ms, :>=, 12
    assert_operator timing.run_ms, :>=, 3
    assert_equal timing.server_timing, timing.server_timing # frozen numbers
    assert_raises(TypeError) { GVLScope::RequestTiming.new(42) }
    assert_same GVLScope::RequestTiming, GVLScope::Rack::RequestTiming
  end

  # A timing can outlive its thread, and the thread's slot is freed once it exited and a snapshot
  # retired it: reading the timing then must not touch the freed slot (it reads no counters).
  def test_a_timing_outlives_its_thread
    GVLScope::Metrics.enable
    timing = nil
    Thread.new { timing = GVLScope::RequestTiming.new; burn(0.01) }.join
    2.times { GVLScope::Metrics.snapshot } # retires, then prunes, the exited thread's slot
    assert_nil GVLScope::Native.metrics_thread(timing.thread)
    assert_equal 0, timing.run_ns # no slot: the counters read as unchanged (clamped at 0)
    timing.finish!
    assert_equal 0, timing.wait_ns
  end

  def test_server_timing_can_be_turned_off_and_an_existing_header_is_kept
    app = ->(_env) { [200, { "server-timing" => "db;dur=3" }, ["ok"]] }
    assert_match(/\Adb;dur=3, gvl-wait;dur=[\d.]+, gvl-run/, request(GVLScope::Rack.new(app)).headers["server-timing"])
    assert_equal "db;dur=3", request(GVLScope::Rack.new(app, server_timing: false)).headers["server-timing"]
  end

  # The header goes in wherever the app's response allows: in place (C) for a plain response, on
  # copies for frozen ones, appended to what is there under either spelling or as an Array value;
  # once, whoever adds it (C with the route, Ruby for a route function, C then Ruby when there is
  # work after the response), for a route's first request and for later ones.
  def test_server_timing_on_every_shape_of_response
    value = /gvl-wait;dur=[\d.]+, gvl-run;dur=[\d.]+(, idle;dur=[\d.]+)?(, gc;dur=[\d.]+)?/
    setups = { default: {}, no_routes: { route: false }, route_function: { route: ->(_env) { "home" } },
               after_response: { log_wait_over_ms: 10_000, logger: Logger.new(nil) } }
    setups.each do |setup, options|
      shapes = {
        plain: -> { [200, { "content-type" => "text/plain" }, ["ok"]] },
        frozen_response: -> { [200, { "content-type" => "text/plain" }, ["ok"]].freeze },
        frozen_headers: -> { [200, { "content-type" => "text/plain" }.freeze, ["ok"]] },
        capitalized: -> { [200, { "Server-Timing" => "db;dur=3" }, ["ok"]] },
        array_value: -> { [200, { "server-timing" => ["db;dur=3"] }, ["ok"]] },
      }
      shapes.each do |shape, make|
        response = nil
        middleware = GVLScope::Rack.new(->(_env) { response = make.call }, **options)
        2.times do |nth| # the route's first request (named in Ruby), then one the table knows
          what = "#{setup}, #{shape}, request #{nth + 1}"
          status, headers, body = middleware.call({ "REQUEST_METHOD" => "GET", "PATH_INFO" => "/#{shape}" })
          assert_equal [200, ["ok"]], [status, body], what
          case shape
          when :capitalized
            assert_match(/\Adb;dur=3, #{value}\z/, headers["Server-Timing"], what)
            refute headers.key?("server-timing"), what
          when :array_value then assert_equal ["db;dur=3"], headers["server-timing"][0..-2], what
                                 assert_match(/\A#{value}\z/, headers["server-timing"].last, what)
          else assert_match(/\A#{value}\z/, headers["server-timing"], what)
          end
          refute response[1].key?("server-timing"), "#{what}: a frozen Hash is copied, not changed" if shape == :frozen_headers
        end
      end
    end
  end

  def test_a_request_that_waited_too_long_is_logged
    log = StringIO.new
    writers = []
    logger = Object.new
    logger.define_singleton_method(:warn) do |line|
      writers << Thread.current
      log.puts(line)
    end
    app = ->(_env) { [200, {}, ["ok"]] }
    GVLScope::Rack.new(app, log_wait_over_ms: 0, logger: logger).call(Rack::MockRequest.env_for("/slow"))
    GVLScope::Rack.new(app, log_wait_over_ms: 10_000, logger: logger).call(Rack::MockRequest.env_for("/fast"))
    assert GVLScope::LogWriter.shared.flush(30)

    # The request only hands its line over: the write (which gives up the GVL) is another thread's.
    assert_equal [GVLScope::LogWriter::THREAD_NAME], writers.map(&:name)
    refute_includes writers, Thread.current
    assert_match(%r{\Agvlscope: GET /slow waited [\d.]+ ms for the GVL \([\d.]+ ms of it before the app started[^)]*\); }, log.string)
    assert_match(/; in the app [\d.]+ ms: run [\d.]+ ms, idle [\d.]+ ms, gc [\d.]+ ms$/, log.string)
    refute_includes log.string, "/fast"
  end

  def test_exceptions_pass_through_and_the_timing_is_finished
    env = Rack::MockRequest.env_for("/")
    app = ->(_env) { raise IOError, "boom" }
    assert_raises(IOError) { GVLScope::Rack.new(app).call(env) }
    assert env["gvlscope"].finished?
  end

  def test_bad_options_fail_when_the_app_is_built
    app = ->(_env) { [200, {}, []] }
    Dir.mktmpdir do |dir|
      blocker = File.join(dir, "file")
      File.write(blocker, "")
      [
        [{ server_timming: false }, /unknown option :server_timming/],
        [{ log_wait_over_ms: "100" }, /log_wait_over_ms must be a number/],
        [{ flight_recorder: { dir: File.join(blocker, "x") } }, /dump directory .* is not writable/],
        [{ flight_recorder: { wait_over: 3 } }, /unknown flight_recorder option :wait_over/],
        [{ flight_recorder: "yes" }, /flight_recorder must be true or a Hash/],
      ].each do |options, message|
        error = assert_raises(GVLScope::Error) { GVLScope::Rack.new(app, **options) }
        assert_match message, error.message
        refute_includes error.message, "\n"
        refute GVLScope::FlightRecorder.running?
      end
    end
  end

  def test_a_slow_request_dumps_the_flight_recorder_once
    Dir.mktmpdir do |dir|
      app = lambda do |env|
        burn(0.25) if env["PATH_INFO"] == "/slow"
        [200, {}, ["ok"]]
      end
      middleware = GVLScope::Rack.new(app, flight_recorder: { dir: dir, signal: nil, wait_over_ms: nil,
                                                              duration_over_ms: 200, min_interval: 60,
                                                              logger: Logger.new(nil) })
      request(middleware, "/fast")
      assert_empty Dir[File.join(dir, "*.gvl")]
      2.times { request(middleware, "/slow") }
      deadline = clock + 10
      sleep 0.05 while Dir[File.join(dir, "*.gvl")].empty? && clock < deadline
      sleep 0.3 # a second dump, if one were coming, would be written by now

      dumps = Dir[File.join(dir, "*.gvl")]
      assert_equal 1, dumps.size
      assert_match(/get-slow-duration-\d+-ms\.gvl\z/, dumps.first)
      timeline = GVLScope::Model.timeline(dumps.first)
      main = timeline.threads.values.find { |thread| thread.label == "main" }
      running_ns = main.intervals.select { |i| i.state == :run }.sum(&:duration_ns)
      assert_operator running_ns, :>=, 200_000_000
      assert_equal 1, GVLScope::FlightRecorder.suppressed
    end
  end
end
