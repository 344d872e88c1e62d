# frozen_string_literal: true

require "test_helper"
require "json"
require "net/http"
require "securerandom"
require "tmpdir"
require_relative "../support/redis_server"

# Real Sidekiq (the CLI, in a child process) processing real jobs from a real Redis
# (redis-server on a free loopback port), with GVLScope::Sidekiq added as docs/sidekiq.md shows
# (test/fixtures/sidekiq/app.rb). Sidekiq 8 comes from the main Gemfile, Sidekiq 7 from
# gemfiles/sidekiq7.gemfile (BUNDLE_GEMFILE for the child). Jobs are pushed straight into Redis
# as Sidekiq's client does; the numbers are read from the middleware's /metrics and Sidekiq's log.
# Every wait has a deadline; Sidekiq and Redis are stopped in teardown.
class SidekiqTest < Minitest::Test
  include GVLScopeTestHelper

  APP = File.join(ROOT, "test/fixtures/sidekiq/app.rb")
  GEMFILES = { 8 => File.join(ROOT, "Gemfile"), 7 => File.join(ROOT, "gemfiles/sidekiq7.gemfile") }.freeze
  BOOT_TIMEOUT = 60

  Process_ = Struct.new(:pid, :log_path, :metrics_port) do
    def log = File.read(log_path)
  end

  def setup
    skip "redis-server is not installed (script/test installs it)" unless RedisServer.available?
    @dir = Dir.mktmpdir("gvlscope-sidekiq")
    @redis = RedisServer.new
    @sidekiqs = []
  end

  def teardown
    @sidekiqs&.each { |sidekiq| stop(sidekiq) }
    @redis&.stop
    FileUtils.rm_rf(@dir) if @dir
  end

  def clock = Process.clock_gettime(Process::CLOCK_MONOTONIC)

  # `sidekiq -r app.rb` under Sidekiq +version+; waits until the middleware started (its /metrics
  # line), or for options "off" until Sidekiq is up. +env+: more of the app's environment (JOB_ENDS).
  def start_sidekiq(version, options, concurrency: 5, env: {})
    log_path = File.join(@dir, "sidekiq-#{@sidekiqs.size}.log")
    env = { "BUNDLE_GEMFILE" => GEMFILES.fetch(version), "REDIS_URL" => @redis.url, "GVLSCOPE_SIDEKIQ" => options,
            "RUBYOPT" => nil, **env }
    pid = Process.spawn(env, RbConfig.ruby, "-I", File.join(ROOT, "lib"), "-rbundler/setup", "-e",
                        'load Gem.bin_path("sidekiq", "sidekiq")', "--", "-r", APP, "-c", concurrency.to_s, "-q", "default", "-q", "low",
                        "-t", "3", out: log_path, err: [:child, :out], pgroup: true)
    sidekiq = Process_.new(pid, log_path)
    @sidekiqs << sidekiq
    ready = options == "off" ? /Sidekiq #{version}\.\d+\.\d+ connecting to Redis/ : %r{GVL metrics on http://127\.0\.0\.1:(\d+)/metrics}
    wait_for(sidekiq, BOOT_TIMEOUT, "boot") { |log| log[ready] }
    sidekiq.metrics_port = sidekiq.log[%r{GVL metrics on http://127\.0\.0\.1:(\d+)/metrics}, 1]&.to_i
    sleep 0.5 if options == "off" # its processors start after the Redis connection
    sidekiq
  end

  def stop(sidekiq)
    Process.kill(:TERM, -sidekiq.pid)
    Timeout.timeout(15) { Process.wait(sidekiq.pid) }
  rescue Timeout::Error
    Process.kill(:KILL, -sidekiq.pid)
    Process.wait(sidekiq.pid)
  rescue Errno::ESRCH, Errno::ECHILD
    nil
  end

  def wait_for(sidekiq, seconds, what)
    deadline = clock + seconds
    until (found = yield(sidekiq.log))
      flunk "sidekiq: no #{what} in #{seconds} s:\n#{sidekiq.log}" if clock > deadline
      flunk "sidekiq exited:\n#{sidekiq.log}" if Process.waitpid(sidekiq.pid, Process::WNOHANG)
      sleep 0.05
    end
    found
  end

  # As Sidekiq::Client pushes a job; returns its jid. enqueued_at: as Sidekiq +version+'s client
  # stamps it (8: Integer ms since the epoch, 7: Float seconds), from +now+ (CLOCK_REALTIME, s).
  def push(klass, *args, queue: "default", retry_count: false, version: 8, now: Process.clock_gettime(Process::CLOCK_REALTIME))
    jid = SecureRandom.hex(12)
    now_ms = (now * 1000).floor
    @redis.call("SADD", "queues", queue)
    @redis.call("LPUSH", "queue:#{queue}", JSON.generate("class" => klass, "args" => args, "queue" => queue, "jid" => jid,
                                                         "retry" => retry_count, "created_at" => now_ms,
                                                         "enqueued_at" => version == 7 ? now : now_ms))
    jid
  end

  def metrics(sidekiq)
    PrometheusText.parse(Net::HTTP.get(URI("http://127.0.0.1:#{sidekiq.metrics_port}/metrics")))
  end

  # name{labels without pid} => value
  def job_samples(sidekiq)
    metrics(sidekiq).values.each_with_object({}) do |(name, labels, value), out|
      out[[name, labels.except("pid")]] = value if name.start_with?("gvlscope_job_")
    end
  end

  def executions(samples, job, queue = "default")
    samples.fetch(["gvlscope_job_executions_total", { "job" => job, "queue" => queue }], 0)
  end

  def wait_for_executions(sidekiq, job, count, queue: "default", seconds: 30)
    deadline = clock + seconds
    loop do
      samples = job_samples(sidekiq)
      return samples if executions(samples, job, queue) >= count
      flunk "#{count} #{job} not run in #{seconds} s:\n#{sidekiq.log}" if clock > deadline

      sleep 0.1
    end
  end

  # Jobs whose log2 bucket of GVL wait reaches at least 2^bucket ns.
  def waits_at_least(samples, job, bucket)
    below = samples.fetch(["gvlscope_job_gvl_wait_seconds_bucket", { "job" => job, "queue" => "default",
                                                                     "le" => format("%.9g", 2**(bucket - 1) * 1e-9) }])
    executions(samples, job) - below
  end

  [8, 7].each do |version|
    # A fast job alone finds the GVL free: nothing else in the process runs Ruby when its thread
    # wakes up from Redis (Sidekiq's other threads wait on Redis or sleep), so it waits for the
    # GVL only as long as a hand-over takes (us). Beside a job burning CPU, the fast job's
    # thread, woken from Redis, must wait for the burner's 100 ms timeslice to end; it wakes at
    # a moment unrelated to the timeslice, so waits ~U(0, 100 ms) per wake-up (and it needs the
    # GVL several times: waking, logging "start"). P(one wait < 8 ms) ~ 8 %.
    define_method(:"test_sidekiq_#{version}_a_fast_job_waits_beside_a_cpu_job_and_not_alone") do
      recorder_dir = File.join(@dir, "flight")
      sidekiq = start_sidekiq(version, "{ log_wait_over_ms: 20, stats_every: 1, prometheus_port: 0, " \
                                       "flight_recorder: { dir: #{recorder_dir.inspect}, signal: nil, wait_over_ms: nil, " \
                                       "duration_over_ms: 1000 } }")
      alone_jids = Array.new(10) { push("FastJob").tap { sleep 0.03 } }
      alone = wait_for_executions(sidekiq, "FastJob", 10)

      # 2 s, and on until the 12 fast jobs below ran: each of them runs beside it, however late a
      # busy machine delivers it.
      hard = push("HardJob", 2000, 12)
      wait_for(sidekiq, 10, "HardJob start") { |log| log =~ /#{hard}.*start/ }
      beside_jids = Array.new(10) { push("FastJob").tap { sleep 0.05 } }
      2.times { push("FastJob", queue: "low") }
      failing = push("FailingJob", 7, retry_count: 1)
      wait_for_executions(sidekiq, "FastJob", 20)
      wait_for_executions(sidekiq, "FastJob", 2, queue: "low")
      samples = wait_for_executions(sidekiq, "HardJob", 1, seconds: 10)
      samples = wait_for_executions(sidekiq, "FailingJob", 1, seconds: 10)

      # Alone: most (7 of 10) waited less than 2^20 ns (1 ms) in all. Not all: on a busy machine
      # the OS may keep another of Sidekiq's threads off its core while it holds the GVL, or the
      # woken thread off one after a hand-over (seen: one of 10 alone waited 20 ms at load 13).
      assert_operator waits_at_least(alone, "FastJob", 21), :<=, 3, alone.inspect
      # Beside the CPU job: at least 5 of those 10 waited 2^23 ns (8.4 ms) or more.
      beside_slow = waits_at_least(samples, "FastJob", 24) - waits_at_least(alone, "FastJob", 24)
      assert_operator beside_slow, :>=, 5, samples.inspect
      # The jobs' thread time adds up: run + wait + idle + gc = duration + pickup wait.
      parts = %w[run wait idle gc].sum { |state| samples[["gvlscope_job_seconds_total", { "job" => "FastJob", "queue" => "default", "state" => state }]] }
      whole = samples[["gvlscope_job_duration_seconds_total", { "job" => "FastJob", "queue" => "default" }]] +
              samples[["gvlscope_job_pickup_wait_seconds_total", { "job" => "FastJob", "queue" => "default" }]]
      assert_in_delta whole, parts, 1e-6
      # The CPU job spins for at least 2 s: all of them are its thread's, running or waiting
      # for the GVL while the fast jobs' threads take their turns. gvlscope's clock is the TSC,
      # calibrated against CLOCK_MONOTONIC over 2 ms at load (ext/gvlscope/clock.c): its rate is
      # off by up to a few tenths of a percent, hence 1 % of slack.
      hard = %w[run wait idle gc].to_h { |state| [state, samples[["gvlscope_job_seconds_total", { "job" => "HardJob", "queue" => "default", "state" => state }]]] }
      assert_operator hard.values.sum, :>=, 2.0 * 0.99, hard.inspect
      assert_operator hard["run"], :>=, 1.0, hard.inspect

      log = sidekiq.log
      # The threshold's lines: only jobs that waited >= 20 ms, some of those beside the CPU job; of
      # the ones alone, no more than their histogram says waited over 2^24 ns (16.8 ms).
      slow_lines = log.scan(/gvlscope: FastJob \(queue default, jid (\h+)\) waited ([\d.]+) ms for the GVL/)
      refute_empty slow_lines.map(&:first) & beside_jids, log
      slow_lines.each do |jid, ms|
        assert_operator Float(ms), :>=, 20.0
        assert_includes alone_jids + beside_jids, jid
      end
      assert_operator slow_lines.count { |jid, _| alone_jids.include?(jid) }, :<=, waits_at_least(alone, "FastJob", 25), log
      # The process's stats, once a second.
      wait_for(sidekiq, 10, "2 stats lines") { |text| text.scan(/gvlscope sidekiq pid #{sidekiq.pid}: [\d.]+ s, GVL held [\d.]+%/).size >= 2 }
      # The 2 s job triggered the flight recorder (duration_over_ms: 1000).
      dump = wait_for(sidekiq, 10, "flight recorder dump") { Dir[File.join(recorder_dir, "*hardjob-duration-*.gvl")].first }
      assert_operator GVLScope::Model.timeline(dump).threads.size, :>=, 2
      # The failing job failed as Sidekiq alone would have it: in the retry set with its own error.
      retried = JSON.parse(@redis.call("ZRANGE", "retry", "0", "-1").fetch(0))
      assert_equal [failing, "FailingJob::Boom", "boom 7"], retried.values_at("jid", "error_class", "error_message")
      assert_match(/Sidekiq #{version}\.\d+\.\d+ connecting to Redis/, log)
    end
  end

  # gvlscope's line for each job (log_wait_over_ms: 0): jid => { "wait", "pickup", "queue" (from the
  # fetch, when the hand-off told it), "duration", "queue latency" } in ms.
  JOB_LINE = /gvlscope: \w+ \(queue \w+, jid (\h+)\) waited ([\d.]+) ms for the GVL \(([\d.]+) ms of it before the job started(.*?)\); in the job ([\d.]+) ms: .*; queue latency ([\d.]+) ms/
  COLOURS = /\e\[[\d;]*m/

  def job_lines(log)
    log.gsub(COLOURS, "").scan(JOB_LINE).to_h do |jid, wait, pickup, rest, duration, latency|
      [jid, { "wait" => Float(wait), "pickup" => Float(pickup), "queue" => rest[/reached ([\d.]+) ms before/, 1]&.then { Float(_1) },
              "duration" => Float(duration), "queue latency" => Float(latency) }]
    end
  end

  BURST = 10 # Sidekiq's concurrency, and the CPU-bound jobs that keep all its processors busy
  BURN_MS = 1000
  DELAYED_MS = 20.0 # as bench/wait_truth.rb's: what a quick job alone varies by on a loaded machine
  ROUNDING_MS = 0.1 # the line's figures are to 0.1 ms
  ENQUEUED_AT_MS = 1.0 # Sidekiq 8's stamp is the push's wall clock cut to the ms

  [8, 7].each do |version|
    # A burst: BURST CPU-bound jobs hold every processor, and quick jobs pushed behind them sit in
    # Redis until one is free (issue 36: such a job reported 0.0 ms). For every job, the physical
    # bounds, within the figures' rounding and the clocks' error (gvlscope's clock is the TSC,
    # calibrated to 1 %; enqueued_at and the pusher's stamps are the wall clock):
    #   gvl wait <= queue latency + job time <= push-to-finish as the pusher measured it
    # and the quick jobs' delay (push-to-finish minus the same job's alone) is named: queue latency
    # plus the GVL wait in the job (the wait before the start is inside the queue latency, counted
    # once) cover >= 80 % of it for >= 9 of 10 delayed jobs.
    define_method(:"test_sidekiq_#{version}_a_bursts_jobs_queue_latency_and_gvl_wait_cover_what_the_pusher_saw") do
      ends_path = File.join(@dir, "ends.json")
      sidekiq = start_sidekiq(version, "{ log_wait_over_ms: 0, stats_every: nil, prometheus_port: 0 }",
                              concurrency: BURST, env: { "JOB_ENDS" => ends_path })
      pushed = {} # jid => CLOCK_REALTIME just before its push
      stamped_push = lambda do |klass, *args|
        now = Process.clock_gettime(Process::CLOCK_REALTIME)
        push(klass, *args, version: version, now: now).tap { |jid| pushed[jid] = now }
      end
      # Warm-up, not measured. Without it, once in ~10 runs (Sidekiq 7) an alone job's fetch was
      # stamped ~10 ms before its push, and 0.7 ms of GVL wait from before the push was charged to
      # it: the hand-off's arrival is the fetch's longest block (ext/gvlscope/handoff.c), which
      # right after boot may be something else than the BRPOP that returned the job (a processor's
      # first connection to Redis, we think; not confirmed). Known, not fixed here.
      push("FastJob", version: version)
      wait_for_executions(sidekiq, "FastJob", 1)
      sleep 1
      alone = Array.new(5) do |i|
        stamped_push.("FastJob").tap { wait_for_executions(sidekiq, "FastJob", i + 2) }
      end
      burners = Array.new(BURST) { stamped_push.("BurstJob", BURST, BURN_MS) }
      wait_for(sidekiq, 30, "#{BURST} BurstJobs started") { |log| burners.all? { |jid| log =~ /#{jid}.*start/ } }
      quick = Array.new(10) { stamped_push.("FastJob").tap { sleep 0.02 } }
      wait_for_executions(sidekiq, "FastJob", 1 + alone.size + quick.size, seconds: 60)
      wait_for_executions(sidekiq, "BurstJob", BURST, seconds: 60)
      lines = wait_for(sidekiq, 10, "a line per job") { |log| (found = job_lines(log)).size > pushed.size && found }
      stop(sidekiq)
      ends = JSON.parse(File.read(ends_path))

      push_to_finish = pushed.to_h { |jid, at| [jid, (ends.fetch(jid) - at) * 1000] }
      pushed.each_key do |jid|
        line = lines.fetch(jid)
        clock_error = 0.01 * [line["wait"], line["duration"]].max + 2 * ROUNDING_MS
        assert_operator line["wait"], :<=, line["queue latency"] + line["duration"] + clock_error, "#{jid}: #{line}"
        assert_operator line["queue latency"] + line["duration"], :<=, push_to_finish[jid] + ENQUEUED_AT_MS + clock_error,
                        "#{jid}: #{line}, push to finish #{push_to_finish[jid]} ms"
        assert_operator line["queue"], :<=, line["queue latency"] + ROUNDING_MS, "#{jid}: #{line}" if line["queue"]
      end

      alone_ms = GVLScope::Units.median(alone.map { |jid| push_to_finish[jid] })
      delayed = quick.filter_map do |jid|
        added = push_to_finish[jid] - alone_ms
        line = lines[jid]
        [jid, (line["queue latency"] + line["wait"] - line["pickup"]) / added] if added >= DELAYED_MS
      end
      # Pushed while every processor burns for BURN_MS: most of them wait in Redis.
      assert_operator delayed.size, :>=, 5, "#{delayed.size} of #{quick.size} delayed: #{push_to_finish.slice(*quick)}"
      covered = delayed.count { |_, coverage| coverage >= 0.8 }
      assert_operator covered * 10, :>=, delayed.size * 9, "coverage of the delayed jobs: #{delayed.to_h}"
    end
  end

  # Sidekiq's own log line for a lost connection: refused when it reconnects, reset or EOF when a
  # fetcher was blocked in a read as Redis died.
  LOST_REDIS = /RedisClient::(CannotConnect|Connection)Error/

  # Redis goes away under a running Sidekiq: Sidekiq logs its own connection errors and retries as
  # it would without gvlscope; gvlscope's stats keep coming, gvlscope warns about nothing (at most
  # once a minute); when Redis is back, jobs run and are counted again.
  def test_redis_going_away_changes_nothing_sidekiq_does
    sidekiq = start_sidekiq(8, "{ stats_every: 1, prometheus_port: 0 }")
    push("FastJob")
    wait_for_executions(sidekiq, "FastJob", 1)
    @redis.kill
    outage_start = sidekiq.log.size
    stats_line = /gvlscope sidekiq pid #{sidekiq.pid}:/
    # Sidekiq's fetchers notice the outage when their blocking read fails or their next call does:
    # wait for Sidekiq's own error line and two of gvlscope's stats lines, not a fixed time.
    during = wait_for(sidekiq, 30, "Redis connection error and 2 stats lines during the outage") do |text|
      outage = text[outage_start..]
      outage if outage.match?(LOST_REDIS) && outage.scan(stats_line).size >= 2
    end
    @redis.restart
    push("FastJob")
    samples = wait_for_executions(sidekiq, "FastJob", 2, seconds: 40)

    assert_equal 2, executions(samples, "FastJob")
    # Sidekiq reports the lost connection itself (its fetchers log it, with a backtrace).
    assert_match(LOST_REDIS, during)
    assert_operator during.scan(stats_line).size, :>=, 2, during
    gvlscope_warnings = sidekiq.log.lines.grep(/gvlscope: GVLScope::Sidekiq|gvlscope:.*(could not|stopped|raised)/)
    assert_operator gvlscope_warnings.size, :<=, 1, gvlscope_warnings.join
    assert_nil Process.waitpid(sidekiq.pid, Process::WNOHANG), "sidekiq still runs"
  end
end
