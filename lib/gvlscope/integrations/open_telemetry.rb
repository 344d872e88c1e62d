# frozen_string_literal: true

require "delegate"
require_relative "../recorder/metrics"
require_relative "../recorder/breakdown"
require_relative "../support/units"
require_relative "../recorder/fork"
require_relative "../version"
require_relative "request_hooks"

module GVLScope
  # GVL numbers as OpenTelemetry metrics, through the official Ruby SDK (opentelemetry-metrics-sdk)
  # and whatever readers/exporters the application gave its MeterProvider (OTLP, console, ...).
  #
  #   OpenTelemetry::SDK.configure                               # the app's own setup
  #   GVLScope::OpenTelemetry.install(meter_provider: OpenTelemetry.meter_provider)
  #
  # Metrics (names and units as the OpenTelemetry conventions want them: seconds, "1", "{thread}"):
  #   gvlscope.gvl.wait            histogram, s   every GVL wait of the process (log2 buckets)
  #   gvlscope.gvl.held            counter, s     time some thread held the GVL
  #   gvlscope.gvl.held_ratio      gauge, 1       share of the time since the previous collection it was held
  #   gvlscope.waiting_threads     gauge, {thread} threads waiting for the GVL now
  #   gvlscope.route.gvl.wait      histogram, s   GVL wait per request, attribute route (GVLScope::Breakdown)
  #   gvlscope.route.time          counter, s     run / wait / idle / gc time of requests, attributes route, state
  #   gvlscope.route.duration      counter, s     their duration (the app call)
  #   gvlscope.route.pickup_wait   counter, s     GVL wait before they started (part of state wait):
  #                                               run + wait + idle + gc = duration + pickup_wait
  #   gvlscope.job.*               the same per job class: attributes job, queue; and
  #   gvlscope.job.queue_latency   counter, s     time in their queue, enqueued_at to the start (the
  #                                               pickup wait is part of it)
  # (Through an OpenTelemetry Prometheus exporter these become the names of gvlscope's own /metrics:
  # gvlscope_route_gvl_wait_seconds, gvlscope_route_duration_seconds_total ...)
  #
  # Why not the SDK's instruments: the SDK has no asynchronous histogram, and its observable
  # instruments take one value per callback, with fixed attributes. gvlscope already keeps exact
  # log2 histograms and per-route totals, so it hands them to the SDK as finished data points: a
  # metric stream added to each reader's metric store (the place the SDK's own instruments
  # register theirs). Collecting reads one Metrics snapshot and one Breakdown snapshot per reader.
  module OpenTelemetry
    OWNER = "GVLScope::OpenTelemetry"
    OPTIONS = %i[meter_provider temporality logger otlp_endpoint every].freeze
    # Explicit bucket bounds, in seconds: 2^b ns for b = 0..35 (1 ns to 34 s). gvlscope's log2
    # bucket b (values in [2^(b-1), 2^b) ns) becomes the bucket bounded by 2^b ns, as in the
    # Prometheus exposition; the last bucket takes everything from 34 s up.
    LAST_BOUNDED_BUCKET = 35
    WAIT_BOUNDS = (0..LAST_BOUNDED_BUCKET).map { |bucket| (2**bucket) / 1e9 }.freeze
    STATES = { run: :run_ns, wait: :wait_ns, idle: :idle_ns, gc: :gc_ns }.freeze
    KIND_METRIC = { route: "route", job: "job" }.freeze
    KIND_ATTRIBUTE = { route: "route", job: "job" }.freeze

    @installed = {}.compare_by_identity
    @own_readers = []
    @lock = Mutex.new

    class << self
      # Adds gvlscope's metrics to every reader of +meter_provider+ (an SDK MeterProvider; default
      # the global one), including readers added later. Or, for an app with no OpenTelemetry setup
      # of its own, +otlp_endpoint+ (and +every+ seconds, default 60): gvlscope's own MeterProvider
      # posting to that OTLP/HTTP endpoint (opentelemetry-exporter-otlp-metrics), warning when an
      # export fails. Turns GVLScope::Metrics on. +temporality+ :cumulative or :delta (default: as
      # the SDK reads OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE, else cumulative); +logger+
      # gets gvlscope's warnings (default OpenTelemetry.logger), at most one a minute.
      # Returns the Producer. Bad arguments raise GVLScope::Error here.
      def install(**options)
        Options.reject_unknown!(options, OPTIONS, OWNER)
        load_sdk
        logger = options.fetch(:logger) { ::OpenTelemetry.logger }
        warning = RequestHooks::Warning.new { |line| logger.warn("gvlscope: #{OWNER}: #{line}") }
        temporality = temporality_option(options[:temporality])
        provider = if options.key?(:otlp_endpoint)
                     raise Error, "#{OWNER}: give meter_provider or otlp_endpoint, not both" if options.key?(:meter_provider)

                     own_meter_provider(options[:otlp_endpoint], options.fetch(:every, 60), warning)
                   else
                     raise Error, "#{OWNER}: every goes with otlp_endpoint (a meter_provider has its own readers)" if options.key?(:every)

                     options.fetch(:meter_provider) { ::OpenTelemetry.meter_provider }
                   end
        unless provider.is_a?(::OpenTelemetry::SDK::Metrics::MeterProvider)
          raise Error, "#{OWNER}: meter_provider must be an OpenTelemetry::SDK::Metrics::MeterProvider " \
                       "(OpenTelemetry::SDK.configure first), got #{provider.class}"
        end

        @lock.synchronize do
          raise Error, "#{OWNER}: already installed on this meter provider" if @installed[provider]

          Metrics.enable
          producer = Producer.new(provider, temporality: temporality, warning: warning)
          # Readers the provider has now (the SDK calls Producer#register_with_new_metric_store
          # for each), and those added later.
          provider.register_asynchronous_instrument(producer)
          provider.singleton_class.prepend(LaterReaders)
          @installed[provider] = producer
        end
      end

      def installed?(meter_provider) = @lock.synchronize { !@installed[meter_provider].nil? }

      # The producer installed on +meter_provider+ (LaterReaders asks).
      def producer_for(meter_provider) = @installed[meter_provider]

      private

      def load_sdk
        require "opentelemetry/sdk"
        require "opentelemetry-metrics-sdk"
      rescue LoadError => e
        raise Error, "#{OWNER}: needs the opentelemetry-metrics-sdk gem (#{e.message})"
      end

      # A MeterProvider of gvlscope's own: one periodic reader exporting over OTLP/HTTP.
      def own_meter_provider(endpoint, every, warning)
        unless endpoint.is_a?(String) && endpoint.match?(%r{\Ahttps?://[^/\s]+})
          raise Error, "#{OWNER}: otlp_endpoint must be an http(s) URL such as http://127.0.0.1:4318/v1/metrics, got #{endpoint.inspect}"
        end
        raise Error, "#{OWNER}: every must be a number of seconds > 0, got #{every.inspect}" unless every.is_a?(Numeric) && every.positive?

        begin
          require "opentelemetry-exporter-otlp-metrics"
        rescue LoadError => e
          raise Error, "#{OWNER}: otlp_endpoint needs the opentelemetry-exporter-otlp-metrics gem (#{e.message})"
        end
        exporter = WarningExporter.new(endpoint, warning) do
          ::OpenTelemetry::Exporter::OTLP::Metrics::MetricsExporter.new(endpoint: endpoint)
        end
        # An export (its retries included) gives up after the interval or 10 s, whichever is shorter:
        # a collector that is down must not hold back the next interval's numbers for long.
        reader = ::OpenTelemetry::SDK::Metrics::Export::PeriodicMetricReader.new(
          exporter: exporter, export_interval_millis: every * 1000.0, export_timeout_millis: [every, 10].min * 1000.0
        )
        provider = ::OpenTelemetry::SDK::Metrics::MeterProvider.new(resource: ::OpenTelemetry::SDK::Resources::Resource.default)
        provider.add_metric_reader(reader)
        @own_readers << reader
        provider
      end

      def temporality_option(value)
        value ||= ENV.fetch("OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE", "cumulative").downcase
        case value.to_s
        when "cumulative" then :cumulative
        when "delta", "lowmemory", "low_memory" then :delta
        else raise Error, "#{OWNER}: temporality must be :cumulative or :delta, got #{value.inspect}"
        end
      end

      def after_fork_in_child
        @lock = Mutex.new
        @installed.each_value(&:after_fork)
        # The SDK restarts the readers of the global provider only; these are gvlscope's.
        @own_readers.each(&:after_fork)
      end
    end

    # Prepended to a MeterProvider that gvlscope is installed on: a reader added after install
    # gets gvlscope's metrics too.
    module LaterReaders
      def add_metric_reader(metric_reader)
        result = super
        producer = GVLScope::OpenTelemetry.producer_for(self)
        producer&.register_with_new_metric_store(metric_reader.metric_store) if metric_readers.include?(metric_reader)
        result
      end
    end

    # The OTLP exporter of install(otlp_endpoint:), which says when an export failed (the SDK's
    # reader only logs successes, at debug level): one warning a minute. After fork
    # (PeriodicMetricReader#after_fork calls #reset) the child gets a new exporter: the parent's
    # keeps the parent's HTTP connection.
    class WarningExporter < SimpleDelegator
      attr_reader :failed_exports

      def initialize(endpoint, warning, &build)
        @endpoint = endpoint
        @warning = warning
        @build = build
        @failed_exports = 0
        super(build.call)
      end

      def export(metrics, timeout: nil)
        result = __getobj__.export(metrics, timeout: timeout)
        failed if result != ::OpenTelemetry::SDK::Metrics::Export::SUCCESS
        result
      rescue StandardError => e
        failed(" (#{e.class}: #{e.message})")
        ::OpenTelemetry::SDK::Metrics::Export::FAILURE
      end

      def reset
        __setobj__(@build.call)
        ::OpenTelemetry::SDK::Metrics::Export::SUCCESS
      end

      private

      def failed(why = "")
        @failed_exports += 1
        @warning.warn("could not export to #{@endpoint}#{why}; #{@failed_exports} failed exports so far")
      end
    end

    # What the SDK sees as one asynchronous instrument: it registers a Stream with each reader's
    # metric store.
    class Producer
      attr_reader :temporality, :warning, :meter_provider

      def initialize(meter_provider, temporality:, warning:)
        @meter_provider = meter_provider
        @temporality = temporality
        @warning = warning
        @scope = ::OpenTelemetry::SDK::InstrumentationScope.new("gvlscope", VERSION)
        @streams = []
      end

      # Called by the SDK (MeterProvider#register_asynchronous_instrument) for each reader.
      def register_with_new_metric_store(metric_store, aggregation: nil, default_aggregation: nil) # rubocop:disable Lint/UnusedMethodArgument
        stream = Stream.new(self)
        @streams << stream
        metric_store.add_metric_stream(stream)
        stream
      end

      def metric_data(name, description, unit, kind, points, monotonic: nil)
        ::OpenTelemetry::SDK::Metrics::State::MetricData.new(
          name, description, unit, kind, @meter_provider.resource, @scope, points,
          kind == :observable_gauge ? nil : @temporality, nil, nil, monotonic
        )
      end

      def after_fork = @streams.each(&:after_fork)
    end

    # One reader's view: collect(start, end) answers MetricData for everything at once, from one
    # Metrics snapshot and one Breakdown snapshot. Its own state (the previous collection) makes
    # held_ratio an interval and, with delta temporality, the differences.
    class Stream
      def initialize(producer)
        @producer = producer
        after_fork
        # held_ratio's first interval starts at install (Metrics may have counted long before).
        @previous_snapshot = Metrics.snapshot if Metrics.enabled?
      end

      # The metric store sets it on every stream; gvlscope's cardinality is bounded by Breakdown.
      def cardinality_limit=(_limit); end

      # Forget everything before now (a forked child's counters start from zero).
      def after_fork
        @lock = Mutex.new
        @previous_snapshot = nil
        @previous_points = {}
        @breakdown_start = nil
        @previous_end = nil
      end

      # Called by the SDK's MetricStore#collect with epoch ns. Never raises into the SDK.
      def collect(_start_time, end_time)
        @lock.synchronize { metric_data(end_time) }
      rescue StandardError => e
        @producer.warning.warn("could not collect: #{e.class}: #{e.message}")
        []
      end

      private

      def metric_data(now)
        @breakdown_start ||= now
        delta = @producer.temporality == :delta
        start = delta ? (@previous_end || @breakdown_start) : @breakdown_start
        data = []
        if Metrics.enabled?
          snapshot = Metrics.snapshot
          # Cumulative since Metrics counted from zero (enable or reset): a reset shows as a new start.
          process_start = delta ? start : now - snapshot.wall_ns
          process_metrics(data, snapshot, process_start, now)
          @previous_snapshot = snapshot
        else
          @producer.warning.warn("GVLScope::Metrics is disabled: only per-route/job numbers are reported")
        end
        breakdown_metrics(data, Breakdown.snapshot, start, now)
        @previous_end = now
        data.compact
      end

      def process_metrics(data, snapshot, start, now)
        interval = @previous_snapshot ? snapshot - @previous_snapshot : snapshot
        max = @producer.temporality == :cumulative ? snapshot.longest_wait_ns / 1e9 : nil
        wait = histogram_point(:wait, {}, snapshot.wait_histogram, snapshot.wait_histogram.sum, snapshot.wait_ns, start, now,
                               max)
        data << metric("gvlscope.gvl.wait", "Waits for the GVL, each one (sum: all GVL wait, waits in progress included)",
                       "s", :histogram, [wait])
        data << metric("gvlscope.gvl.held", "Time some thread held the GVL", "s", :observable_counter,
                       [sum_point(:held, {}, snapshot.held_ns / 1e9, start, now)], monotonic: true)
        data << metric("gvlscope.gvl.held_ratio", "Share of the time since the previous collection the GVL was held",
                       "1", :observable_gauge, [gauge_point(interval.held_ratio, start, now)])
        data << metric("gvlscope.waiting_threads", "Threads waiting for the GVL now", "{thread}", :observable_gauge,
                       [gauge_point(snapshot.waiting_threads, start, now)])
        loops = snapshot.loops
        return unless loops.turns.positive? # event loops (Falcon, async) only

        turn = histogram_point(:loop_turn, {}, loops.turn_histogram, loops.turns, loops.busy_ns, start, now,
                               @producer.temporality == :cumulative ? loops.longest_turn_ns / 1e9 : nil)
        data << metric("gvlscope.event_loop.turn", "Turns event loops gave their fibers, each one: how late the loop " \
                                                   "came back to its select (event-loop delay)", "s", :histogram, [turn])
      end

      def breakdown_metrics(data, entries, start, now)
        entries.group_by(&:kind).each do |kind, kind_entries|
          base = "gvlscope.#{KIND_METRIC.fetch(kind)}"
          what = kind == :route ? "requests" : "jobs"
          waits, times, durations, pickups, latencies, loop_waits = [], [], [], [], [], []
          kind_entries.each do |entry|
            attributes = attributes_of(entry)
            scale = entry.sample_rate < 1.0 ? 1.0 / entry.sample_rate : 1.0
            buckets = entry.wait_buckets.map { |count| (count * scale).round }
            waits << histogram_point([kind, :wait], attributes, buckets, buckets.sum, entry.wait_ns * scale, start, now, nil)
            STATES.each do |state, field|
              times << sum_point([kind, :time], attributes.merge("state" => state.to_s), entry[field] * scale / 1e9, start, now)
            end
            durations << sum_point([kind, :duration], attributes, entry.duration_ns * scale / 1e9, start, now)
            pickups << sum_point([kind, :pickup], attributes, entry.pickup_wait_ns * scale / 1e9, start, now)
            latencies << sum_point([kind, :queue_latency], attributes, entry.queue_latency_ns * scale / 1e9, start, now) if kind == :job
            loop_waits << sum_point([kind, :loop_wait], attributes, entry.loop_wait_ns * scale / 1e9, start, now) if entry.loop_wait_ns.positive?
          end
          data << metric("#{base}.gvl.wait", "GVL wait of each of the #{what}", "s", :histogram, waits)
          data << metric("#{base}.time", "Time of the #{what} by state: run, wait (for the GVL), idle, gc", "s",
                         :observable_counter, times, monotonic: true)
          data << metric("#{base}.duration", "Duration of the #{what} (run + wait + idle + gc = duration + pickup_wait)",
                         "s", :observable_counter, durations, monotonic: true)
          data << metric("#{base}.pickup_wait", "GVL wait before the #{what} started (counted in state wait)", "s",
                         :observable_counter, pickups, monotonic: true)
          data << metric("#{base}.queue_latency", "Time the #{what} spent in their queue, from enqueued_at to the start " \
                                                  "(the pickup wait is part of it)", "s", :observable_counter, latencies,
                         monotonic: true)
          next if loop_waits.empty? # requests on event loops' tasks (Falcon) only

          data << metric("#{base}.loop_wait", "Wait of the #{what} for their event loop (other fibers of its thread ran), " \
                                              "apart from the GVL wait", "s", :observable_counter, loop_waits, monotonic: true)
        end
      end

      def attributes_of(entry)
        attributes = { KIND_ATTRIBUTE.fetch(entry.kind) => entry.label }
        entry.tags.each do |key, value|
          attributes[key.to_s] = value.is_a?(Numeric) || value == true || value == false ? value : value.to_s
        end
        attributes.freeze
      end

      def metric(name, description, unit, kind, points, monotonic: nil)
        return nil if points.empty? # the SDK exports no metric without points either

        @producer.metric_data(name, description, unit, kind, points, monotonic: monotonic)
      end

      # A counter's point: cumulative, or its change since the previous collection (delta). +metric+
      # and +attributes+ name the series whose previous value is kept.
      def sum_point(metric, attributes, total, start, now)
        value = total
        if @producer.temporality == :delta
          key = [metric, attributes]
          value = total - (@previous_points[key] || 0)
          @previous_points[key] = total
        end
        ::OpenTelemetry::SDK::Metrics::Aggregation::NumberDataPoint.new(attributes, start, now, value, 0, nil)
      end

      def gauge_point(value, start, now)
        ::OpenTelemetry::SDK::Metrics::Aggregation::NumberDataPoint.new({}, start, now, value, 0, nil)
      end

      def histogram_point(metric, attributes, log2_counts, count, sum_ns, start, now, max)
        counts = Array.new(LAST_BOUNDED_BUCKET + 2, 0)
        log2_counts.each_with_index { |n, bucket| counts[[bucket, LAST_BOUNDED_BUCKET + 1].min] += n }
        sum = sum_ns / 1e9
        if @producer.temporality == :delta
          key = [metric, attributes]
          before_count, before_sum, before_counts = @previous_points[key]
          @previous_points[key] = [count, sum, counts]
          if before_counts
            count -= before_count
            sum -= before_sum
            counts = counts.zip(before_counts).map { |a, b| a - b }
          end
        end
        ::OpenTelemetry::SDK::Metrics::Aggregation::HistogramDataPoint.new(attributes, start, now, count, sum, counts,
                                                                            WAIT_BOUNDS, 0, nil, nil, max)
      end
    end
  end

  after_fork { OpenTelemetry.__send__(:after_fork_in_child) }
end
