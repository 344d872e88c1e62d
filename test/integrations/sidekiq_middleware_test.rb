# frozen_string_literal: true

require "test_helper"
require "logger"
require "stringio"
require "socket"
require "net/http"
require "gvlscope/sidekiq"

# GVLScope::Sidekiq in-process, through Sidekiq's own middleware chain (Sidekiq::Config, the
# chain's #invoke, as Sidekiq's processor calls it) without Redis: options checked at startup,
# job exceptions untouched, labels, sampling, the stats thread's start, stop and fork.
# Real Sidekiq processes with a real Redis: test/integrations/sidekiq_test.rb.
class SidekiqMiddlewareTest < Minitest::Test
  include GVLScopeTestHelper

  class Boom < StandardError; end

  def setup
    GVLScope::Breakdown.reset!
    GVLScope::Sidekiq.reset!
    @log = StringIO.new
    @logger = Logger.new(@log)
    @previous_logger = Sidekiq.default_configuration.logger
    Sidekiq.default_configuration.logger = @logger
  end

  def teardown
    GVLScope::Sidekiq.reset!
    GVLScope::Breakdown.reset!
    Sidekiq.default_configuration.logger = @previous_logger
    GVLScope::Metrics.disable if GVLScope::Metrics.enabled?
  end

  def config(**options)
    Sidekiq::Config.new.tap do |config|
      config.logger = @logger
      config.server_middleware { |chain| chain.add GVLScope::Sidekiq, **options }
    end
  end

  def job(klass = "HardJob", **extra) = { "class" => klass, "args" => [], "jid" => "abc123", "queue" => "default", **extra }

  def run_job(config, job = self.job, queue = "default", &block)
    config.server_middleware.invoke(Object.new, job, queue, &(block || -> { :done }))
  end

  def jobs = GVLScope::Breakdown.snapshot.select { |e| e.kind == :job }.to_h { |e| [[e.label, e.tags], e] }

  def test_bad_options_stop_the_boot_and_at_job_time_leave_jobs_alone
    [
      [{ log_wait_over: 3 }, /unknown option :log_wait_over/],
      [{ sample: 2 }, /sample must be a number in 0\.0\.\.1\.0, got 2/],
      [{ stats_every: -1 }, /stats_every must be a number of seconds > 0, or nil, got -1/],
      [{ job_class: "HardJob" }, /job_class must respond to call\(job\)/],
      [{ flight_recorder: "yes" }, /flight_recorder must be true or a Hash/],
      [{ log_wait_over_ms: "5" }, /log_wait_over_ms must be a number of milliseconds/],
      [{ max_jobs: 1.5 }, /max_labels must be an Integer >= 0, got 1\.5/],
    ].each do |options, message|
      error = assert_raises(GVLScope::Error, options.inspect) { GVLScope::Sidekiq.startup(config(**options)) }
      assert_match message, error.message
      assert_match(/\AGVLScope::(Sidekiq|Breakdown)/, error.message)
      refute_includes error.message, "\n"
    end

    # Built at job time without a startup (a chain added elsewhere): one warning, the job runs.
    bad = config(sample: 2)
    assert_equal [:ran, :ran], Array.new(2) { run_job(bad) { :ran } }
    assert_equal 1, @log.string.scan("GVLScope::Sidekiq is off: GVLScope::Sidekiq: sample must be").size, @log.string
    assert_empty jobs
  end

  # The job's exception is the very object the job raised, and the job still counts.
  def test_job_exceptions_pass_through_untouched
    config = config(stats_every: nil)
    GVLScope::Sidekiq.startup(config)
    boom = Boom.new("boom 7")
    raised = assert_raises(Boom) { run_job(config) { raise boom } }
    assert_same boom, raised
    assert_equal 1, jobs[["HardJob", { queue: "default" }]].count
    assert_raises(Sidekiq::Shutdown) { run_job(config) { raise Sidekiq::Shutdown } }
    assert_equal 2, jobs[["HardJob", { queue: "default" }]].count
  end

  def test_jobs_are_labelled_by_class_and_queue
    config = config(stats_every: nil, job_class: ->(job) { job["args"].first == "admin" ? "Admin::#{job['class']}" : nil })
    GVLScope::Sidekiq.startup(config)
    run_job(config, job("HardJob"), "default") { sleep 0.005 }
    run_job(config, job("HardJob"), "low")
    run_job(config, job("Sidekiq::ActiveJob::Wrapper", "wrapped" => "InvoiceMailerJob"), "mailers")
    run_job(config, job("HardJob", "args" => ["admin"]), "default")

    assert_equal({ ["HardJob", { queue: "default" }] => 1, ["HardJob", { queue: "low" }] => 1,
                   ["InvoiceMailerJob", { queue: "mailers" }] => 1, ["Admin::HardJob", { queue: "default" }] => 1 },
                 jobs.transform_values(&:count))
    hard = jobs[["HardJob", { queue: "default" }]]
    assert_operator hard.idle_ns, :>=, 5_000_000
    assert_equal hard.duration_ns + hard.pickup_wait_ns, hard.run_ns + hard.wait_ns + hard.idle_ns + hard.gc_ns
  end

  def test_a_job_class_function_that_raises_is_warned_about_once_a_minute
    config = config(stats_every: nil, job_class: ->(_job) { raise KeyError, "no label" })
    GVLScope::Sidekiq.startup(config)
    results = Array.new(5) { run_job(config) { :ran } }
    assert_equal [:ran] * 5, results
    assert_equal 5, jobs[["HardJob", { queue: "default" }]].count
    lines = @log.string.lines.grep(/gvlscope/)
    assert_equal 1, lines.size, @log.string
    assert_match(/job_class function raised KeyError: no label; the job's class is used/, lines.first)
  end

  # sample: 0.3 measures the jobs for which Kernel#rand < 0.3: with a seed, exactly those.
  def test_sampling_measures_the_sampled_share
    config = config(stats_every: nil, sample: 0.3)
    GVLScope::Sidekiq.startup(config)
    srand(42)
    1000.times { run_job(config) }
    srand(42)
    expected = 1000.times.count { rand < 0.3 }
    entry = jobs[["HardJob", { queue: "default" }]]
    assert_equal expected, entry.count
    assert_in_delta 300, entry.count, 60 # binomial: sd 14.5
    assert_equal 0.3, entry.sample_rate
  end

  def test_a_slow_job_is_logged_with_its_numbers
    config = config(stats_every: nil, log_wait_over_ms: 0)
    GVLScope::Sidekiq.startup(config)
    writers = []
    @logger.formatter = proc do |_severity, _time, _name, message|
      writers << Thread.current
      "#{message}\n"
    end
    run_job(config, job("SlowJob"), "critical") { sleep 0.01 }
    assert GVLScope::LogWriter.shared.flush(30)
    assert_equal [GVLScope::LogWriter::THREAD_NAME], writers.map(&:name), "the job hands its line over; another thread writes it"
    assert_match(/gvlscope: SlowJob \(queue critical, jid abc123\) waited [\d.]+ ms for the GVL \([\d.]+ ms of it before the job started[^)]*\); in the job [\d.]+ ms: run [\d.]+ ms, idle (\d+\.\d) ms, gc [\d.]+ ms/, @log.string)
    assert_operator Float(@log.string[/idle ([\d.]+) ms/, 1]), :>=, 10
  end

  # Stats lines every stats_every seconds from startup; shutdown stops the thread at once, not
  # after the interval; /metrics serves the per-job series.
  # Sidekiq's enqueued_at as Sidekiq 8 writes it (Integer ms since the epoch) and as Sidekiq 7 does
  # (Float seconds): the job's queue latency is the wall clock at its start minus the stamp, in its
  # series, its log line and /metrics. A stamp ahead of our clock (another host's) counts 0; a job
  # without one (or with something else there) adds 0 and its line says nothing of it.
  def test_a_jobs_queue_latency_runs_from_its_enqueued_at_to_its_start
    config = config(stats_every: nil, log_wait_over_ms: 0)
    GVLScope::Sidekiq.startup(config)
    wall_ns = -> { Process.clock_gettime(Process::CLOCK_REALTIME, :nanosecond) }
    bounds = lambda do |stamp_ns, &job|
      before = wall_ns.()
      job.call
      [before - stamp_ns, wall_ns.() - stamp_ns]
    end
    eight_ms = wall_ns.() / 1_000_000 - 250
    eight = bounds.(eight_ms * 1_000_000) { run_job(config, job("EightJob", "enqueued_at" => eight_ms)) }
    seven_s = wall_ns.() / 1e9 - 0.4
    seven = bounds.((seven_s * 1e9).round) { run_job(config, job("SevenJob", "enqueued_at" => seven_s)) }
    run_job(config, job("SkewedJob", "enqueued_at" => wall_ns.() / 1_000_000 + 60_000))
    run_job(config, job("SkewedJob", "enqueued_at" => wall_ns.() / 1e9 + 60))
    run_job(config, job("UnstampedJob"))
    run_job(config, job("UnstampedJob", "enqueued_at" => "2026-11-28T08:00:00Z"))
    [-1, 2**62, Float::NAN, Float::INFINITY, -0.5, 1e300].each { |stamp| run_job(config, job("BadStampJob", "enqueued_at" => stamp)) }

    float_ns = 1_000 # a Float of seconds since the epoch holds them to ~0.24 us
    assert_includes eight.first..eight.last, jobs[["EightJob", { queue: "default" }]].queue_latency_ns
    assert_includes (seven.first - float_ns)..(seven.last + float_ns), jobs[["SevenJob", { queue: "default" }]].queue_latency_ns
    assert_equal [2, 0], jobs[["SkewedJob", { queue: "default" }]].then { |e| [e.count, e.queue_latency_ns] }
    assert_equal [2, 0], jobs[["UnstampedJob", { queue: "default" }]].then { |e| [e.count, e.queue_latency_ns] }
    assert_equal [6, 0], jobs[["BadStampJob", { queue: "default" }]].then { |e| [e.count, e.queue_latency_ns] }

    assert GVLScope::LogWriter.shared.flush(30)
    latency_in_line = lambda do |label|
      lines = @log.string.lines.grep(/gvlscope: #{label} /)
      lines.map { |line| line[/; queue latency ([\d.]+) ms \(enqueued_at to the start\)$/, 1]&.then { Float(_1) } }
    end
    assert_in_delta eight.sum / 2e6, latency_in_line.("EightJob").fetch(0), (eight.last - eight.first) / 2e6 + 0.05
    assert_in_delta seven.sum / 2e6, latency_in_line.("SevenJob").fetch(0), (seven.last - seven.first) / 2e6 + 0.05
    assert_equal [0.0, 0.0], latency_in_line.("SkewedJob")
    assert_equal [nil, nil], latency_in_line.("UnstampedJob"), "no stamp, nothing said"

    exposition = PrometheusText.parse(GVLScope::Formats::Prometheus.exposition_of(
                                        [[GVLScope::Metrics.snapshot, {}]], breakdown: [[GVLScope::Breakdown.snapshot, {}]]
                                      ))
    latencies = exposition.values.select { |name, _, _| name == "gvlscope_job_queue_latency_seconds_total" }
    assert_equal jobs.to_h { |(label, _), e| [label, e.queue_latency_ns / 1e9] },
                 latencies.to_h { |_, labels, value| [labels["job"], value] }
  end

  def test_stats_lines_and_metrics_start_and_stop_with_sidekiq
    fast = config(stats_every: 0.1, prometheus_port: 0)
    GVLScope::Sidekiq.startup(fast)
    setup = GVLScope::Sidekiq.new.setup # a different Setup (no options): not started
    refute setup.running?
    started = fast.server_middleware.entries.first.make_new.setup
    assert started.running?
    run_job(fast)
    # Two lines 0.1 s apart; a busy machine may delay them, so they are waited for (up to 10 s).
    lines = []
    100.times do
      lines = @log.string.lines.grep(/gvlscope sidekiq pid #{Process.pid}: /)
      break if lines.size >= 2

      sleep 0.1
    end
    assert_operator lines.size, :>=, 2, @log.string
    assert_match(/GVL held [\d.]+%, waiting threads now \d+ \(avg [\d.]+\), \d+ waits, wait p50 <= .*, \d+ jobs measured$/, lines.last)
    metrics = PrometheusText.parse(Net::HTTP.get(URI("http://127.0.0.1:#{started.metrics_port}/metrics")))
    assert_includes metrics.values, ["gvlscope_job_executions_total", { "pid" => Process.pid.to_s, "job" => "HardJob", "queue" => "default" }, 1]

    slow = config(stats_every: 30)
    GVLScope::Sidekiq.startup(slow)
    thread_count = Thread.list.size
    took = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    GVLScope::Sidekiq.shutdown
    took = Process.clock_gettime(Process::CLOCK_MONOTONIC) - took
    assert_operator took, :<, 1.0, "shutdown waits for no interval"
    assert_operator Thread.list.size, :<=, thread_count - 2, "both stats threads ended"
    refute started.running?
  end

  # A forked child has no stats thread of the parent's, does not hold the parent's /metrics
  # socket (connections are refused once the parent closed it), and starts its own at startup.
  def test_fork_leaves_the_parent_s_thread_and_socket_behind
    out, err, status = run_ruby(<<~RUBY)
      require "gvlscope/sidekiq"
      require "socket"
      require "logger"
      require "stringio"
      log = StringIO.new
      config = Sidekiq::Config.new
      config.logger = Logger.new(log)
      config.server_middleware { |chain| chain.add GVLScope::Sidekiq, stats_every: 0.1, prometheus_port: 0 }
      GVLScope::Sidekiq.startup(config)
      setup = config.server_middleware.entries.first.make_new.setup
      port = setup.metrics_port
      reader, writer = IO.pipe
      pid = fork do
        reader.close
        inherited = setup.running?
        sleep 0.3 # the parent closes its server meanwhile
        refused = begin
          TCPSocket.new("127.0.0.1", port).close
          false
        rescue Errno::ECONNREFUSED
          true
        end
        child_log = StringIO.new
        config.logger = Logger.new(child_log)
        GVLScope::Sidekiq.startup(config)
        sleep 0.25
        own = child_log.string.scan(/gvlscope sidekiq pid \#{Process.pid}:/).size
        GVLScope::Sidekiq.shutdown
        writer.puts [inherited, refused, own, setup.running?].inspect
        writer.close
      end
      writer.close
      GVLScope::Sidekiq.shutdown
      child = reader.read
      Process.wait(pid)
      puts child
    RUBY
    assert status.success?, err
    inherited, refused, own, running_after = eval(out) # rubocop:disable Security/Eval
    refute inherited, "the parent's stats thread is not running in the child"
    assert refused, "the child does not keep the parent's /metrics socket open"
    assert_operator own, :>=, 1, "the child's own stats thread logs its own pid"
    refute running_after
  end
end
