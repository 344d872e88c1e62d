# frozen_string_literal: true

require "test_helper"
require "json"
require "net/http"
require "securerandom"
require "tmpdir"
require_relative "../support/puma_process"
require_relative "../support/falcon_process"
require_relative "../support/redis_server"

# GVLScope.on_request and on_job under real servers: a real Puma and a real Falcon serving
# test/fixtures/web/callbacks.ru, a real Sidekiq (with a real redis-server) running
# test/fixtures/sidekiq/app.rb. The callbacks write each request's (job's) figures to a file; the
# test holds them against what the same request's Server-Timing header and env["gvlscope"] (read
# outside the middleware once it returned) say, and the same jobs' /metrics. Every server is
# stopped in teardown, every wait has a deadline.
class CallbacksServersTest < Minitest::Test
  include GVLScopeTestHelper
  include PumaProcess

  RACKUP = File.join(ROOT, "test/fixtures/web/callbacks.ru")
  SIDEKIQ_APP = File.join(ROOT, "test/fixtures/sidekiq/app.rb")
  FIGURES = %w[finished same wait_ns pickup_wait_ns run_ns idle_ns gc_ns duration_ns queue_ns queue_thread_ns
               loop_wait_ns loop_wait_known server_timing].freeze

  def setup
    @dir = Dir.mktmpdir("gvlscope-callbacks")
    @log = File.join(@dir, "callbacks.jsonl")
    @servers = []
    @stops = []
  end

  def teardown
    @servers.each { |server| stop(server) }
    @stops.each(&:call)
    FileUtils.rm_rf(@dir)
  end

  def start_puma(env = {})
    start_puma_in(@dir, <<~RUBY, env: { "GVLSCOPE_CALLBACK_LOG" => @log, **env }) { |server| @servers << server }
      threads 5, 5
      rackup #{RACKUP.inspect}
      environment "test"
    RUBY
  end

  # A connection kept alive for the test's whole length (Net::HTTP opens a new one after 2 s idle).
  def kept_connection(port)
    http = Net::HTTP.new("127.0.0.1", port)
    http.open_timeout = 10
    http.read_timeout = 30
    http.keep_alive_timeout = 600
    http.start
  end

  # GET +path+ with x-id +id+, on +session+ or a new connection; [id, response].
  def get(port, path, id, session = nil)
    request = Net::HTTP::Get.new(path, "x-id" => id)
    response = session ? session.request(request) : Net::HTTP.start("127.0.0.1", port, open_timeout: 10, read_timeout: 30) { |http| http.request(request) }
    [id, response]
  end

  # Quick requests kept alive, on new connections, and beside a 300 ms CPU burn on another thread
  # (Puma) or fiber (Falcon), sent 50-100 ms into it: id => response.
  # Two first requests ("warm-"), the server's first on a new connection.
  def send_requests(port)
    responses = Array.new(2) { |i| get(port, "/", "warm-#{i}") }
    kept = kept_connection(port)
    responses += Array.new(4) { |i| get(port, "/", "kept-#{i}", kept) }
    responses += Array.new(3) { |i| get(port, "/", "fresh-#{i}") }
    3.times do |i|
      burn = Thread.new { get(port, "/?cpu_ms=300", "burn-#{i}") }
      sleep rand(0.05..0.1)
      responses << get(port, "/", "beside-#{i}", i.even? ? kept : nil)
      responses << burn.value
    end
    kept.finish
    responses.to_h
  end

  # The callbacks' lines: [id or jid, source] => [records].
  def records(key)
    File.readlines(@log).map { |line| JSON.parse(line) }.group_by { |record| [record.fetch(key), record.fetch("source")] }
  end

  # Each request went to each callback exactly once, finished, with the figures env["gvlscope"]
  # and Server-Timing gave the same request. Returns the first callback's records by id.
  def assert_once_each_with_the_requests_figures(responses, sources: %w[first last env])
    by_source = records("id")
    assert_equal responses.keys.product(sources).sort, by_source.keys.sort, "a line per request and source"
    by_source.each { |key, lines| assert_equal 1, lines.size, "#{key}: #{lines}" }
    responses.to_h do |id, response|
      assert_equal "200", response.code, id
      assert_equal "ok", response.body, id
      first = by_source.fetch([id, "first"]).first
      assert first["finished"], "#{id}: #{first}"
      assert first["same"], "#{id}: the callback's timing is env[\"gvlscope\"]"
      sources.drop(1).each do |source|
        assert_equal first.slice(*FIGURES), by_source.fetch([id, source]).first.slice(*FIGURES), "#{id}: first and #{source}"
      end
      assert_equal response["server-timing"], first["server_timing"], "#{id}: the header and the callback's figures"
      [id, first]
    end
  end

  def test_puma_calls_each_callback_once_per_request_with_the_figures_of_its_header_and_env
    server = start_puma
    responses = send_requests(server.port)
    figures = assert_once_each_with_the_requests_figures(responses)

    burns = figures.select { |id, _| id.start_with?("burn") }.values
    # 300 ms of the thread's CPU time in Ruby: held the GVL at least that long (1 %: the clock's calibration).
    burns.each { |burn| assert_operator burn["run_ns"], :>=, 0.99 * 300e6, burn }
    figures.each_value do |f|
      assert_operator f["wait_ns"] + f["run_ns"] + f["idle_ns"] + f["gc_ns"], :>=, f["duration_ns"], f
      refute f["loop_wait_known"], f
    end
    refute_match(/gvlscope:/, server.log)
  end

  def test_puma_a_raising_callback_is_warned_about_once_and_the_requests_go_on
    server = start_puma("GVLSCOPE_CALLBACK_RAISE" => "1")
    kept = kept_connection(server.port)
    responses = Array.new(3) { |i| get(server.port, "/", "kept-#{i}", kept) }.to_h
    kept.finish
    responses.merge!(Array.new(2) { |i| get(server.port, "/", "fresh-#{i}") }.to_h)
    assert_once_each_with_the_requests_figures(responses)

    warnings = server.log.lines.grep(/gvlscope/)
    assert_equal 1, warnings.size, server.log
    assert_match(/\Agvlscope: the on_request callback at #{Regexp.escape(RACKUP)}:\d+ raised ArgumentError: callback failed for kept-0 /,
                 warnings.first)
  end

  # Falcon: every request on a fiber of one event loop; the requests beside the burn waited for
  # the loop, which their loop_wait_ns carries, as Server-Timing's loop-wait does.
  def test_falcon_gives_the_callbacks_a_requests_loop_wait
    falcon = FalconProcess.new(rackup: RACKUP, dir: @dir, env: { "GVLSCOPE_CALLBACK_LOG" => @log })
    @stops << -> { falcon.stop }
    falcon.start
    responses = send_requests(falcon.port)
    figures = assert_once_each_with_the_requests_figures(responses)

    # Loop tracking starts at the middleware's first request on a loop's task: the ones after it.
    figures.reject { |id, _| id.start_with?("warm") }.each do |id, f|
      assert f["loop_wait_known"], "#{id}: #{f}"
      assert_includes f["server_timing"], "loop-wait;dur=", "#{id}: #{f}"
    end
    beside = figures.select { |id, _| id.start_with?("beside") }.values
    # The quick request's bytes came while the burn kept the loop's only thread: it waited for
    # the loop in at least one of the three tries (a loaded machine may start the burn late).
    assert_operator beside.map { |f| f["loop_wait_ns"] }.max, :>=, 10e6, beside.inspect
  end

  def test_sidekiq_calls_each_job_callback_once_per_job_with_the_figures_of_its_metrics
    skip "redis-server is not installed (script/test installs it)" unless RedisServer.available?
    redis = RedisServer.new
    @stops << -> { redis.stop }
    redis.start
    sidekiq_log = File.join(@dir, "sidekiq.log")
    pid = Process.spawn({ "BUNDLE_GEMFILE" => File.join(ROOT, "Gemfile"), "REDIS_URL" => redis.url, "RUBYOPT" => nil,
                          "GVLSCOPE_SIDEKIQ" => "{ stats_every: nil, prometheus_port: 0 }", "GVLSCOPE_CALLBACK_LOG" => @log,
                          "GVLSCOPE_CALLBACK_RAISE" => "1" },
                        RbConfig.ruby, "-I", File.join(ROOT, "lib"), "-rbundler/setup", "-e", 'load Gem.bin_path("sidekiq", "sidekiq")',
                        "--", "-r", SIDEKIQ_APP, "-c", "3", "-q", "default", "-t", "3",
                        out: sidekiq_log, err: [:child, :out], pgroup: true)
    @servers << Server.new(pid, sidekiq_log)
    port = await(pid, sidekiq_log, "its /metrics") { |log| log[%r{GVL metrics on http://127\.0\.0\.1:(\d+)/metrics}, 1] }

    jobs = { "FastJob" => Array.new(3) { push(redis, "FastJob") }, "SleepJob" => [push(redis, "SleepJob", 30)],
             "FailingJob" => [push(redis, "FailingJob", 1)] }
    jids = jobs.values.flatten
    await(pid, sidekiq_log, "a line per job and callback") { File.exist?(@log) && File.readlines(@log).size >= 2 * jids.size }
    samples = PrometheusText.parse(Net::HTTP.get(URI("http://127.0.0.1:#{port}/metrics"))).values
                            .to_h { |name, labels, value| [[name, labels.except("pid")], value] }

    by_source = records("jid")
    assert_equal jids.product(%w[first last]).sort, by_source.keys.sort, File.read(@log)
    by_source.each { |key, lines| assert_equal 1, lines.size, "#{key}: #{lines}" }
    jobs.each do |klass, class_jids|
      firsts = class_jids.map { |jid| by_source.fetch([jid, "first"]).first }
      firsts.each do |first|
        assert_equal [true, klass, "default"], first.values_at("finished", "class", "queue"), first
        assert_equal first.except("source"), by_source.fetch([first["jid"], "last"]).first.except("source")
      end
      labels = { "job" => klass, "queue" => "default" }
      assert_equal class_jids.size, samples.fetch(["gvlscope_job_executions_total", labels]), klass
      # /metrics: the class's sums in seconds, %.9g
      sums = { %w[gvlscope_job_seconds_total run] => "run_ns", %w[gvlscope_job_seconds_total wait] => "wait_ns",
               %w[gvlscope_job_seconds_total idle] => "idle_ns", %w[gvlscope_job_seconds_total gc] => "gc_ns",
               ["gvlscope_job_duration_seconds_total"] => "duration_ns",
               ["gvlscope_job_pickup_wait_seconds_total"] => "pickup_wait_ns",
               ["gvlscope_job_queue_latency_seconds_total"] => "queue_latency_ns" }
      sums.each do |(name, state), field|
        metric = samples.fetch([name, state ? labels.merge("state" => state) : labels])
        sum = firsts.sum { |first| first.fetch(field) } / 1e9
        assert_in_delta sum, metric, 1e-9 + sum * 1e-8, "#{klass} #{field}: callbacks #{sum}, /metrics #{metric}"
      end
    end
    sleeper = by_source.fetch([jobs["SleepJob"].first, "first"]).first
    assert_operator sleeper["idle_ns"], :>=, 0.99 * 30e6, sleeper

    warnings = File.read(sidekiq_log).lines.grep(/on_job callback/)
    assert_equal 1, warnings.size, File.read(sidekiq_log)
    assert_match(/the on_job callback at #{Regexp.escape(SIDEKIQ_APP)}:\d+ raised ArgumentError: callback failed for \h+ /, warnings.first)
  end

  private

  def await(pid, log_path, what, seconds: BOOT_TIMEOUT)
    deadline = clock + seconds
    until (found = yield(File.read(log_path)))
      flunk "no #{what} in #{seconds} s:\n#{File.read(log_path)}" if clock > deadline
      flunk "exited:\n#{File.read(log_path)}" if Process.waitpid(pid, Process::WNOHANG)
      sleep 0.05
    end
    found
  end

  # As Sidekiq::Client pushes a job (Sidekiq 8: enqueued_at in ms since the epoch); its jid.
  def push(redis, klass, *args)
    jid = SecureRandom.hex(12)
    now_ms = (Process.clock_gettime(Process::CLOCK_REALTIME) * 1000).floor
    redis.call("SADD", "queues", "default")
    redis.call("LPUSH", "queue:default", JSON.generate("class" => klass, "args" => args, "queue" => "default", "jid" => jid,
                                                       "retry" => false, "created_at" => now_ms, "enqueued_at" => now_ms))
    jid
  end
end
