# frozen_string_literal: true

require "sidekiq"
require_relative "../metrics"
require_relative "../request_timing"
require_relative "../flight_recorder"
require_relative "../breakdown"
require_relative "../fork"
require_relative "../units"
require_relative "../callbacks"
require_relative "../formats/prometheus"
require_relative "request_hooks"
require_relative "log_writer"
require_relative "metrics_server"
require_relative "stats_line"
require_relative "handoffs"
require_relative "open_telemetry_spans"

module GVLScope
  # Sidekiq server middleware: how the thread that ran each job spent its time — running Ruby
  # (holding the GVL), waiting for the GVL, idle (IO, sleep, locks) and in GC, and how long the job
  # sat in its queue before that (its queue latency, from Sidekiq's own enqueued_at) — added up per
  # job class and queue (GVLScope::Breakdown, which /metrics shows), with a log line for the jobs that
  # waited too long and the process's GVL stats in Sidekiq's log every stats_every seconds.
  #
  #   require "gvlscope/sidekiq"
  #   Sidekiq.configure_server do |config|
  #     config.server_middleware { |chain| chain.add GVLScope::Sidekiq, log_wait_over_ms: 100 }
  #   end
  #
  # Options (checked when Sidekiq starts: anything unknown or wrong is a GVLScope::Error then,
  # which stops the boot; Sidekiq builds a middleware per job, so they are read once and shared):
  #   log_wait_over_ms: nil   a warn line in Sidekiq's log for each job that waited this long for the GVL
  #                           (written by a thread of its own, GVLScope::LogWriter: never by the job)
  #   flight_recorder:  nil   true or a Hash, as GVLScope::Rack's: wait_over_ms: 100, duration_over_ms: nil
  #                           and FlightRecorder.start's options; dumps when a job waited or lasted too long
  #   stats_every:      60    seconds between the process's GVL stats lines in Sidekiq's log; nil/0: none
  #   sample:           1.0   share of jobs measured (0.0..1.0); the others run untouched
  #   job_class:        nil   ->(job) { "label" }: a job's label from its payload (default: the class,
  #                           ActiveJob's own for wrapped jobs)
  #   max_jobs:         nil   job classes (with their queue) kept apart (Breakdown's cap, default 100)
  #   prometheus_port:  nil   serve /metrics (process and per-job series) on this loopback port
  #   prometheus_host:  "127.0.0.1"
  #   open_telemetry:   nil   true: the job's figures as attributes of the OpenTelemetry span current
  #                           when it returns (opentelemetry-instrumentation-sidekiq's; ruby.gvl.wait_ms …,
  #                           OpenTelemetrySpans); nil: on when OpenTelemetry tracing is set up when
  #                           Sidekiq starts; false: off
  #
  # The middleware never changes what a job does: its exceptions pass through untouched, and a
  # failure of gvlscope's own (a job_class function that raises, a logger that fails) is warned
  # about at most once a minute while jobs keep running.
  class Sidekiq
    OPTIONS = %i[log_wait_over_ms flight_recorder stats_every sample job_class max_jobs prometheus_port
                 prometheus_host open_telemetry].freeze
    OWNER = "GVLScope::Sidekiq"
    DEFAULT_STATS_EVERY = 60

    # The options of one `chain.add` line, checked once, and what they started (the stats thread,
    # the /metrics server); shared by the middleware Sidekiq builds for each job.
    class Setup
      attr_reader :sample, :sampling

      def initialize(options)
        Options.reject_unknown!(options, OPTIONS, OWNER)
        @log_wait_over_ns = Units.ms_option_to_ns(options[:log_wait_over_ms], "log_wait_over_ms", OWNER)
        @sample = RequestHooks.sample_rate(options[:sample], OWNER)
        @sampling = @sample < 1.0
        @stats_every = stats_every_option(options.fetch(:stats_every, DEFAULT_STATS_EVERY))
        @job_class = options[:job_class]
        unless @job_class.nil? || @job_class.respond_to?(:call)
          raise Error, "#{OWNER}: job_class must respond to call(job) (a Proc), got #{@job_class.inspect}"
        end
        Breakdown.configure(max_jobs: options[:max_jobs]) if options.key?(:max_jobs)
        @prometheus = options.slice(:prometheus_port, :prometheus_host) if options[:prometheus_port]
        @recorder_triggers = RequestHooks.flight_recorder_triggers(options[:flight_recorder], OWNER,
                                                                   defaults: { logger: ::Sidekiq.logger })
        @spans = OpenTelemetrySpans.option(options[:open_telemetry], OWNER)
        @tags = {} # queue name => { queue: name }, frozen: the Breakdown key allocates nothing
        @warning = RequestHooks::Warning.new { |line| ::Sidekiq.logger.warn(line) }
        Metrics.enable
        Handoffs.install_sidekiq # the wait before the job: from the fetch that brought it
      end

      # After the job: its numbers into its series, GVLScope.on_job's callbacks, the slow-job line,
      # the recorder's trigger. Never raises (this runs in the middleware's ensure, beside the
      # job's own exception).
      def finish(job, queue, timing)
        OpenTelemetrySpans.annotate(timing) if @spans
        label = label_of(job)
        tags = @tags[queue] || (@tags[queue] = { queue: queue.to_s.dup.freeze }.freeze)
        Breakdown.record(:job, label, timing, tags, @sample)
        Callbacks.job_finished(timing, job, ::Sidekiq.logger) unless Callbacks.job.empty?
        log_slow(label, job, queue, timing) if @log_wait_over_ns && timing.wait_ns >= @log_wait_over_ns
        if @recorder_triggers && (why = RequestHooks.recorder_trigger(@recorder_triggers, timing))
          FlightRecorder.dump_later("#{label} #{why}")
        end
      rescue StandardError => e
        @warning.warn("gvlscope: GVLScope::Sidekiq could not report a job: #{e.class}: #{e.message}")
      end

      # At Sidekiq's startup (once per process): the stats thread and /metrics.
      def start(logger)
        return if @started

        @started = true
        @logger = logger
        start_metrics_server(logger) if @prometheus
        start_reporter(logger) if @stats_every
      end

      # At Sidekiq's shutdown: the thread ends within a second, the port closes.
      def stop
        @stop&.push(true)
        @reporter&.join(1)
        @metrics_server&.stop
        @reporter = @stop = @metrics_server = nil
        @started = false
      end

      # In a forked child: the parent's thread did not survive the fork and its /metrics socket is
      # the parent's; the child starts its own if Sidekiq starts up in it.
      def forget_inherited
        @metrics_server&.close_inherited
        @reporter = @stop = @metrics_server = nil
        @started = false
      end

      def running? = !!@reporter&.alive?
      def metrics_port = @metrics_server&.port

      def exposition
        labels = { pid: Process.pid }
        Formats::Prometheus.exposition_of([[Metrics.snapshot, labels]], breakdown: [[Breakdown.snapshot, labels]])
      end

      private

      def label_of(job)
        if @job_class
          begin
            label = @job_class.call(job)
            return label.to_s if label
          rescue StandardError => e
            @warning.warn("gvlscope: GVLScope::Sidekiq's job_class function raised #{e.class}: #{e.message}; " \
                          "the job's class is used")
          end
        end
        job["wrapped"] || job["class"]
      end

      def log_slow(label, job, queue, timing)
        line = format("gvlscope: %s (queue %s, jid %s) waited %.1f ms for the GVL (%s); " \
                      "in the job %.1f ms: run %.1f ms, idle %.1f ms, gc %.1f ms",
                      label, queue, job["jid"], timing.wait_ms, timing.before_start_words("job"),
                      timing.duration_ms, timing.run_ms, timing.idle_ms, timing.gc_ms)
        latency = timing.queue_latency_ms
        line << format("; queue latency %.1f ms (enqueued_at to the start)", latency) if latency
        LogWriter.shared.write(line, ::Sidekiq.logger) # the job hands the line over: no write, no logger lock
      end

      def stats_every_option(seconds)
        return nil if seconds.nil? || seconds == 0 # rubocop:disable Style/NumericPredicate -- nil or a number
        return seconds if seconds.is_a?(Numeric) && seconds.positive?

        raise Error, "#{OWNER}: stats_every must be a number of seconds > 0, or nil, got #{seconds.inspect}"
      end

      def start_metrics_server(logger)
        host = @prometheus.fetch(:prometheus_host, "127.0.0.1")
        @metrics_server = MetricsServer.new(host: host, port: @prometheus[:prometheus_port]) { exposition }.start
        logger.info("gvlscope: GVL metrics on http://#{host}:#{@metrics_server.port}/metrics")
      end

      # One line per interval; woken early by stop, so shutdown does not wait for the interval.
      def start_reporter(logger)
        @stop = stop = Queue.new
        @reporter = Thread.new do
          Thread.current.name = "gvlscope stats"
          previous = Metrics.snapshot
          jobs_before = job_counts
          until stop.pop(timeout: @stats_every)
            snapshot = Metrics.snapshot
            jobs = job_counts
            logger.info("#{StatsLine.for(snapshot - previous, "sidekiq pid #{Process.pid}")}, " \
                        "#{jobs - jobs_before} jobs measured")
            previous = snapshot
            jobs_before = jobs
          end
        rescue StandardError => e
          logger.warn("gvlscope: GVLScope::Sidekiq's stats stopped: #{e.class}: #{e.message}")
        end
      end

      def job_counts = Breakdown.snapshot.sum { |entry| entry.kind == :job ? entry.count : 0 }
    end

    NO_OPTIONS = {}.freeze

    @setups = {}
    @by_identity = {}.compare_by_identity
    @lock = Mutex.new
    # Setup failures at job time (where no startup checked them): warned, the jobs run untouched.
    @warning = RequestHooks::Warning.new { |line| ::Sidekiq.logger.warn(line) }

    class << self
      # The Setup of these options, made once. Sidekiq passes the same options Hash for every job
      # (its chain entry's): found by identity first, which does not hash the Hash.
      def setup_for(options)
        @by_identity[options] || @lock.synchronize do
          setup = @setups[options] ||= Setup.new(options.dup.freeze)
          @by_identity[options] = setup if @by_identity.size < 16 # a caller making new Hashes is not remembered without end
          setup
        end
      end

      # Sidekiq's :startup (registered below): the middleware of the server chain is built once
      # now, so bad options stop the boot, and each Setup starts its thread and /metrics.
      def startup(config)
        ours = config.server_middleware.entries.select { |entry| entry.klass == self }
        @at_startup = true
        setups = ours.map { |entry| entry.make_new.setup }
        @at_startup = false
        setups.uniq.each { |setup| setup.start(config.logger) }
      ensure
        @at_startup = false
      end

      def shutdown = @setups.each_value(&:stop)

      def forget_inherited = @setups.each_value(&:forget_inherited)

      # Tests: forget every Setup (stopping what they started).
      def reset!
        shutdown
        @setups = {}
        @by_identity = {}.compare_by_identity
      end

      attr_reader :warning
    end

    attr_reader :setup

    def initialize(options = nil)
      @setup = self.class.setup_for(options || NO_OPTIONS)
    rescue Error => e
      raise if self.class.setup_for_startup?

      self.class.warning.warn("gvlscope: GVLScope::Sidekiq is off: #{e.message}")
      @setup = nil
    end

    def call(_job_instance, job, queue)
      setup = @setup
      return yield if setup.nil? || (setup.sampling && rand >= setup.sample) # Kernel#rand: reseeded after fork

      timing = RequestTiming.start
      timing.enqueued_at = job["enqueued_at"] # its queue latency: Sidekiq's own stamp, to now (the start)
      begin
        yield
      ensure
        timing.finish!
        setup.finish(job, queue, timing)
      end
    end

    @at_startup = false
    class << self
      # True while startup builds the middleware: there a bad option must raise.
      def setup_for_startup? = @at_startup

      def register(config)
        config.on(:startup) { startup(config) }
        config.on(:shutdown) { shutdown }
      end
    end

    register(::Sidekiq.default_configuration)
    GVLScope.after_fork { forget_inherited }
  end
end
