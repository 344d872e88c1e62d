# frozen_string_literal: true

require_relative "../test_helper"
require_relative "../support/otlp_receiver"
require "opentelemetry-metrics-sdk"
require "opentelemetry-exporter-otlp-metrics"
require "logger"
require "stringio"

# GVLScope::OpenTelemetry through the official SDK: what its in-memory reader collects, and what
# the official OTLP/HTTP exporter posts (decoded from the protobuf a test server received).
class OpenTelemetryTest < Minitest::Test
  include GVLScopeTestHelper

  Timing = Struct.new(:run_ns, :wait_ns, :idle_ns, :gc_ns, :duration_ns)
  SHOW = Timing.new(2_000_000, 3_000_000, 500_000, 0, 5_500_000) # 3 ms of GVL wait: log2 bucket 22 (<= 2^22 ns)
  QUICK = Timing.new(1_000_000, 0, 0, 250_000, 1_250_000)
  QUEUED = Struct.new(*Timing.members, :queue_latency_ns).new(*SHOW.to_a, 4_900_000_000) # a job 4.9 s in its queue
  SILENT = Logger.new(File::NULL)

  def setup
    GVLScope::Breakdown.reset!
    @logged = StringIO.new
    @logger = Logger.new(@logged, formatter: ->(_severity, _time, _progname, message) { "#{message}\n" })
    # The SDK's own messages (a failed export's retries, which may end after the test) stay out of
    # the test output: its logger is silenced for the rest of the run (nothing else here uses it).
    OpenTelemetry.logger = SILENT
    @provider = OpenTelemetry::SDK::Metrics::MeterProvider.new
    @reader = OpenTelemetry::SDK::Metrics::Export::InMemoryMetricPullExporter.new
    @provider.add_metric_reader(@reader)
  end

  def teardown
    GVLScope::Breakdown.reset!
  end

  def record_requests
    2.times { GVLScope::Breakdown.record(:route, "UsersController#show", SHOW) }
    GVLScope::Breakdown.record(:route, "HomeController#index", QUICK)
    GVLScope::Breakdown.record(:job, "HardJob", QUEUED, { queue: "default" })
  end

  def pull(reader = @reader)
    reader.reset
    reader.pull
    reader.metric_snapshots.to_h { |metric| [metric.name, metric] }
  end

  def point(metric, attributes)
    metric.data_points.find { |data_point| data_point.attributes == attributes } or
      flunk "#{metric.name} has no point with #{attributes}: #{metric.data_points.map(&:attributes)}"
  end

  def burn_cpu_in_two_threads(seconds)
    2.times.map do
      Thread.new do
        deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + seconds
        nil while Process.clock_gettime(Process::CLOCK_MONOTONIC) < deadline
      end
    end.each(&:join)
  end

  def test_in_memory_reader_sees_names_units_attributes_and_values
    GVLScope::OpenTelemetry.install(meter_provider: @provider, logger: @logger)
    record_requests
    burn_cpu_in_two_threads(0.3) # two threads taking turns: real GVL waits
    metrics = pull

    # The loops' turns are the process's since tracking began: there when an earlier test of this
    # process ran an event loop (test/recorder/event_loop*_test.rb), whatever the order.
    loops = GVLScope::EventLoops.turns.turns.positive? ? %w[gvlscope.event_loop.turn] : []
    assert_equal loops + %w[gvlscope.gvl.held gvlscope.gvl.held_ratio gvlscope.gvl.wait gvlscope.job.duration gvlscope.job.gvl.wait
                            gvlscope.job.pickup_wait gvlscope.job.queue_latency gvlscope.job.time gvlscope.route.duration
                            gvlscope.route.gvl.wait gvlscope.route.pickup_wait gvlscope.route.time gvlscope.waiting_threads],
                 metrics.keys.sort
    assert_equal({ "gvlscope.gvl.wait" => ["s", :histogram], "gvlscope.gvl.held" => ["s", :observable_counter],
                   "gvlscope.gvl.held_ratio" => ["1", :observable_gauge],
                   "gvlscope.waiting_threads" => ["{thread}", :observable_gauge],
                   "gvlscope.route.gvl.wait" => ["s", :histogram], "gvlscope.route.time" => ["s", :observable_counter] },
                 metrics.slice("gvlscope.gvl.wait", "gvlscope.gvl.held", "gvlscope.gvl.held_ratio", "gvlscope.waiting_threads",
                               "gvlscope.route.gvl.wait", "gvlscope.route.time").transform_values { |m| [m.unit, m.instrument_kind] })

    show = point(metrics["gvlscope.route.gvl.wait"], { "route" => "UsersController#show" })
    assert_equal 2, show.count
    assert_in_delta 0.006, show.sum, 1e-12
    assert_equal 37, show.bucket_counts.size, "36 bounds, 37 buckets"
    assert_equal({ 22 => 2 }, show.bucket_counts.each_with_index.select { |n, _| n.positive? }.to_h { |n, i| [i, n] })
    assert_in_delta 2**22 / 1e9, show.explicit_bounds[22], 1e-15, "3 ms lies in the bucket bounded by 2^22 ns = 4.19 ms"
    index = point(metrics["gvlscope.route.gvl.wait"], { "route" => "HomeController#index" })
    assert_equal [1, 1], [index.count, index.bucket_counts[0]], "no wait: the zero bucket"
    times = metrics["gvlscope.route.time"]
    { "run" => 0.004, "wait" => 0.006, "idle" => 0.001, "gc" => 0.0 }.each do |state, seconds|
      assert_in_delta seconds, point(times, { "route" => "UsersController#show", "state" => state }).value, 1e-12, state
    end
    assert_in_delta 0.011, point(metrics["gvlscope.route.duration"], { "route" => "UsersController#show" }).value, 1e-12
    assert metrics["gvlscope.route.duration"].is_monotonic
    assert_equal :cumulative, metrics["gvlscope.route.duration"].aggregation_temporality
    job = point(metrics["gvlscope.job.gvl.wait"], { "job" => "HardJob", "queue" => "default" })
    assert_equal [1, 0.003], [job.count, job.sum]
    latency = metrics["gvlscope.job.queue_latency"]
    assert_equal ["s", :observable_counter, true], [latency.unit, latency.instrument_kind, latency.is_monotonic]
    assert_in_delta 4.9, point(latency, { "job" => "HardJob", "queue" => "default" }).value, 1e-12

    waits = metrics["gvlscope.gvl.wait"].data_points.first
    assert_operator waits.count, :>, 0, "the two threads waited for each other"
    assert_equal waits.count, waits.bucket_counts.sum
    assert_operator waits.sum, :>=, 0.1, "two threads sharing the GVL for 0.3 s: one waits ~0.3 s in all"
    assert_operator waits.max, :<=, waits.sum
    held_ratio = metrics["gvlscope.gvl.held_ratio"].data_points.first.value
    assert_operator held_ratio, :>, 0.1, "the GVL was held during the burn"
    assert_operator held_ratio, :<=, 1.0
    assert_kind_of Integer, metrics["gvlscope.waiting_threads"].data_points.first.value
    assert_empty @logged.string
  end

  # held_ratio is the interval since the previous collection: busy, then asleep.
  def test_held_ratio_covers_the_time_since_the_previous_collection
    GVLScope::OpenTelemetry.install(meter_provider: @provider, logger: @logger)
    pull
    burn_cpu_in_two_threads(0.3)
    busy = pull["gvlscope.gvl.held_ratio"].data_points.first.value
    sleep 0.3
    asleep = pull["gvlscope.gvl.held_ratio"].data_points.first.value
    # Busy: two threads burning CPU hold the GVL nearly all the time (0.9 on an idle machine; less
    # when other processes keep the next holder off the CPU at each hand-over). Asleep: free.
    assert_operator asleep, :<, 0.2, "nothing ran: the GVL was free"
    assert_operator busy, :>, [3 * asleep, 0.15].max, "busy #{busy}, asleep #{asleep}"
  end

  def test_cumulative_points_grow_from_a_fixed_start_and_delta_points_are_differences
    cumulative_reader = @reader
    delta_provider = OpenTelemetry::SDK::Metrics::MeterProvider.new
    delta_reader = OpenTelemetry::SDK::Metrics::Export::InMemoryMetricPullExporter.new
    delta_provider.add_metric_reader(delta_reader)
    GVLScope::OpenTelemetry.install(meter_provider: @provider, logger: @logger)
    GVLScope::OpenTelemetry.install(meter_provider: delta_provider, temporality: :delta, logger: @logger)
    record_requests
    first = [pull(cumulative_reader), pull(delta_reader)]
    GVLScope::Breakdown.record(:route, "UsersController#show", QUICK)
    second = [pull(cumulative_reader), pull(delta_reader)]

    show = { "route" => "UsersController#show" }
    before, after = [first, second].map { |(cumulative, _)| point(cumulative["gvlscope.route.gvl.wait"], show) }
    assert_equal [2, 3], [before.count, after.count]
    assert_equal before.start_time_unix_nano, after.start_time_unix_nano
    assert_operator after.time_unix_nano, :>, before.time_unix_nano

    first_delta, second_delta = [first, second].map { |(_, delta)| delta }
    assert_equal :delta, second_delta["gvlscope.route.gvl.wait"].aggregation_temporality
    late = point(second_delta["gvlscope.route.gvl.wait"], show)
    assert_equal [1, 1, 0.0], [late.count, late.bucket_counts[0], late.sum], "only the request since the previous collection"
    assert_equal point(first_delta["gvlscope.route.gvl.wait"], show).time_unix_nano, late.start_time_unix_nano
    assert_in_delta 0.00125, point(second_delta["gvlscope.route.duration"], show).value, 1e-12
    assert_equal 0, point(second_delta["gvlscope.route.gvl.wait"], { "route" => "HomeController#index" }).count
  end

  def test_sampled_series_are_scaled_to_estimates
    GVLScope::OpenTelemetry.install(meter_provider: @provider, logger: @logger)
    GVLScope::Breakdown.record(:job, "SampledJob", SHOW, { queue: "low" }, 0.25)
    metrics = pull
    job = point(metrics["gvlscope.job.gvl.wait"], { "job" => "SampledJob", "queue" => "low" })
    assert_equal [4, 4], [job.count, job.bucket_counts[22]], "one job sampled at 1/4 stands for 4"
    assert_in_delta 0.012, job.sum, 1e-12
  end

  def test_a_reader_added_after_install_gets_the_metrics_too
    GVLScope::OpenTelemetry.install(meter_provider: @provider, logger: @logger)
    later = OpenTelemetry::SDK::Metrics::Export::InMemoryMetricPullExporter.new
    @provider.add_metric_reader(later)
    record_requests
    assert_equal 2, point(pull(later)["gvlscope.route.gvl.wait"], { "route" => "UsersController#show" }).count
    assert_equal 2, point(pull["gvlscope.route.gvl.wait"], { "route" => "UsersController#show" }).count
  end

  # The official OTLP/HTTP exporter (gzip, protobuf) posting to a server of the test, which
  # decodes the body: metric names, the route's histogram point, the process gauges.
  def test_otlp_http_exporter_posts_what_a_receiver_decodes
    receiver = OTLPReceiver.new
    exporter = OpenTelemetry::Exporter::OTLP::Metrics::MetricsExporter.new(endpoint: receiver.endpoint)
    @provider.add_metric_reader(exporter)
    GVLScope::OpenTelemetry.install(meter_provider: @provider, logger: @logger)
    record_requests
    assert_equal OpenTelemetry::SDK::Metrics::Export::SUCCESS, exporter.pull

    request = receiver.next_request or flunk "nothing was posted"
    assert_equal "/v1/metrics", request.path
    assert_equal "gzip", request.headers["content-encoding"]
    scope_metrics = request.decoded.resource_metrics.flat_map(&:scope_metrics)
    ours = scope_metrics.find { |scope| scope.scope.name == "gvlscope" } or flunk "no gvlscope scope"
    assert_equal GVLScope::VERSION, ours.scope.version
    metrics = ours.metrics.to_h { |metric| [metric.name, metric] }
    assert_includes metrics.keys, "gvlscope.gvl.held_ratio"
    assert_includes metrics.keys, "gvlscope.waiting_threads"

    histogram = metrics.fetch("gvlscope.route.gvl.wait")
    assert_equal "s", histogram.unit
    assert_equal :AGGREGATION_TEMPORALITY_CUMULATIVE, histogram.histogram.aggregation_temporality
    show = histogram.histogram.data_points.find do |data_point|
      data_point.attributes.any? { |kv| kv.key == "route" && kv.value.string_value == "UsersController#show" }
    end
    assert show, "the route's point"
    assert_equal 2, show.count
    assert_in_delta 0.006, show.sum, 1e-12
    assert_equal 2, show.bucket_counts[22]
    assert_in_delta 2**22 / 1e9, show.explicit_bounds[22], 1e-15

    time = metrics.fetch("gvlscope.route.time").sum
    assert time.is_monotonic
    wait = time.data_points.find { |data_point| data_point.attributes.map { |kv| [kv.key, kv.value.string_value] }.sort == [%w[route UsersController#show], %w[state wait]] }
    assert_in_delta 0.006, wait.as_double, 1e-12
    ratio = metrics.fetch("gvlscope.gvl.held_ratio").gauge.data_points.first.as_double
    assert_operator ratio, :>, 0.0
    assert_operator ratio, :<=, 1.0
  ensure
    receiver&.close
  end

  # The app's own provider with an OTLP reader whose endpoint nobody listens on: the export thread
  # fails and retries, the app thread goes on at its pace, the provider's other reader still gets
  # every request, gvlscope's collection does not fail.
  def test_unreachable_otlp_endpoint_leaves_the_app_alone
    exporter = OpenTelemetry::Exporter::OTLP::Metrics::MetricsExporter.new(endpoint: "http://127.0.0.1:#{closed_port}/v1/metrics", timeout: 1)
    periodic = OpenTelemetry::SDK::Metrics::Export::PeriodicMetricReader.new(exporter: exporter, export_interval_millis: 50)
    @provider.add_metric_reader(periodic)
    GVLScope::OpenTelemetry.install(meter_provider: @provider, logger: @logger)
    served, longest_gap = serve_requests_for(1.5)
    assert_operator served, :>, 100
    assert_operator longest_gap, :<, 0.5, "no request waited on the exporter"
    assert_equal served, point(pull["gvlscope.route.gvl.wait"], { "route" => "Busy#work" }).count,
                 "the in-memory reader of the same provider got every request"
    assert_empty @logged.string, "gvlscope's own collection did not fail"
  ensure
    # Its thread may be asleep in a retry back-off for up to a minute: ended here, so that it cannot
    # wake (and allocate, and take the GVL) in a later test that counts either.
    periodic&.instance_variable_set(:@continue, false)
    periodic&.instance_variable_get(:@thread)&.then { |thread| thread.kill.join(5) }
  end

  # install(otlp_endpoint:) for an app without OpenTelemetry: gvlscope's own provider posts there.
  def test_otlp_endpoint_alone_posts_every_interval
    receiver = OTLPReceiver.new
    producer = GVLScope::OpenTelemetry.install(otlp_endpoint: receiver.endpoint, every: 0.2, logger: @logger)
    record_requests
    names = nil
    2.times do
      request = receiver.next_request or flunk "nothing was posted"
      names = request.decoded.resource_metrics.flat_map(&:scope_metrics).flat_map(&:metrics).map(&:name)
    end
    assert_includes names, "gvlscope.route.gvl.wait"
    assert_includes names, "gvlscope.gvl.held_ratio"
    assert_empty @logged.string
  ensure
    producer&.meter_provider&.shutdown
    receiver&.close
  end

  # ... and when that endpoint is down: one warning a minute however many exports fail, the app
  # thread unaffected.
  def test_unreachable_otlp_endpoint_gives_one_warning
    begin
      producer = GVLScope::OpenTelemetry.install(otlp_endpoint: "http://127.0.0.1:#{closed_port}/v1/metrics", every: 0.2,
                                                 logger: @logger)
      exporter = producer.meter_provider.metric_readers.first.instance_variable_get(:@exporter)
      deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 30
      served = 0
      longest_gap = 0.0
      until exporter.failed_exports >= 2 || Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
        count, gap = serve_requests_for(0.2)
        served += count
        longest_gap = [longest_gap, gap].max
      end
      assert_operator exporter.failed_exports, :>=, 2
      assert_operator longest_gap, :<, 0.5, "no request waited on the exporter"
      lines = @logged.string.lines
      assert_equal 1, lines.size, @logged.string
      assert_match(%r{\Agvlscope: GVLScope::OpenTelemetry: could not export to http://127\.0\.0\.1:#{closed_port}/v1/metrics; 1 failed exports so far}, lines.first)
    ensure
      # As above: the reader's thread ended here, not left asleep in a back-off into later tests.
      producer&.meter_provider&.metric_readers&.each do |reader|
        reader.instance_variable_set(:@continue, false)
        reader.instance_variable_get(:@thread)&.then { |thread| thread.kill.join(5) }
      end
    end
  end

  def closed_port
    @closed_port ||= begin
      server = TCPServer.new("127.0.0.1", 0)
      server.addr[1].tap { server.close }
    end
  end

  # An app: requests, each a little work and a short sleep (IO). Returns [requests, longest gap in s].
  def serve_requests_for(seconds)
    longest_gap = 0.0
    served = 0
    last = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    deadline = last + seconds
    while (now = Process.clock_gettime(Process::CLOCK_MONOTONIC)) < deadline
      longest_gap = [longest_gap, now - last].max
      last = now
      GVLScope::Breakdown.record(:route, "Busy#work", QUICK)
      served += 1
      sleep 0.002
    end
    [served, longest_gap]
  end

  # A failure inside gvlscope's collection: one warning a minute, the SDK's own instruments still
  # export, the next collection works again.
  def test_a_failing_collection_warns_once_and_the_rest_goes_on
    GVLScope::OpenTelemetry.install(meter_provider: @provider, logger: @logger)
    counter = @provider.meter("app").create_counter("app.requests")
    counter.add(3)
    breakdown = GVLScope::Breakdown.singleton_class
    breakdown.alias_method(:snapshot_before_test, :snapshot)
    breakdown.define_method(:snapshot) { raise IOError, "store unreadable" }
    begin
      3.times { assert_equal 3, pull.fetch("app.requests").data_points.first.value }
    ensure
      breakdown.alias_method(:snapshot, :snapshot_before_test)
      breakdown.remove_method(:snapshot_before_test)
    end
    assert_equal ["gvlscope: GVLScope::OpenTelemetry: could not collect: IOError: store unreadable"], @logged.string.lines.map(&:chomp)
    record_requests
    assert_equal 2, point(pull["gvlscope.route.gvl.wait"], { "route" => "UsersController#show" }).count
  end

  def test_bad_arguments_raise_one_line_at_install
    assert_equal "GVLScope::OpenTelemetry: unknown option :meter (known: meter_provider, temporality, logger, otlp_endpoint, every)",
                 assert_raises(GVLScope::Error) { GVLScope::OpenTelemetry.install(meter: @provider) }.message
    assert_equal "GVLScope::OpenTelemetry: meter_provider must be an OpenTelemetry::SDK::Metrics::MeterProvider " \
                 "(OpenTelemetry::SDK.configure first), got OpenTelemetry::Internal::ProxyMeterProvider",
                 assert_raises(GVLScope::Error) { GVLScope::OpenTelemetry.install(meter_provider: OpenTelemetry::Internal::ProxyMeterProvider.new) }.message
    assert_equal "GVLScope::OpenTelemetry: temporality must be :cumulative or :delta, got :weekly",
                 assert_raises(GVLScope::Error) { GVLScope::OpenTelemetry.install(meter_provider: @provider, temporality: :weekly) }.message
    assert_equal "GVLScope::OpenTelemetry: otlp_endpoint must be an http(s) URL such as http://127.0.0.1:4318/v1/metrics, got \"collector:4318\"",
                 assert_raises(GVLScope::Error) { GVLScope::OpenTelemetry.install(otlp_endpoint: "collector:4318") }.message
    assert_equal "GVLScope::OpenTelemetry: every must be a number of seconds > 0, got 0",
                 assert_raises(GVLScope::Error) { GVLScope::OpenTelemetry.install(otlp_endpoint: "http://127.0.0.1:4318", every: 0) }.message
    assert_equal "GVLScope::OpenTelemetry: give meter_provider or otlp_endpoint, not both",
                 assert_raises(GVLScope::Error) { GVLScope::OpenTelemetry.install(otlp_endpoint: "http://127.0.0.1:4318", meter_provider: @provider) }.message
    assert_equal "GVLScope::OpenTelemetry: every goes with otlp_endpoint (a meter_provider has its own readers)",
                 assert_raises(GVLScope::Error) { GVLScope::OpenTelemetry.install(meter_provider: @provider, every: 5) }.message
    refute GVLScope::OpenTelemetry.installed?(@provider)
    GVLScope::OpenTelemetry.install(meter_provider: @provider)
    assert_equal "GVLScope::OpenTelemetry: already installed on this meter provider",
                 assert_raises(GVLScope::Error) { GVLScope::OpenTelemetry.install(meter_provider: @provider) }.message
  end

  # A forked child (a Puma worker) reports its own numbers only, from a start time after the fork.
  def test_a_forked_child_reports_its_own_numbers
    out, err, status = run_ruby(<<~RUBY)
      require "gvlscope"
      require "opentelemetry-metrics-sdk"
      Timing = Struct.new(:run_ns, :wait_ns, :idle_ns, :gc_ns, :duration_ns)
      provider = OpenTelemetry::SDK::Metrics::MeterProvider.new
      reader = OpenTelemetry::SDK::Metrics::Export::InMemoryMetricPullExporter.new
      provider.add_metric_reader(reader)
      GVLScope::OpenTelemetry.install(meter_provider: provider)
      GVLScope::Breakdown.record(:route, "Parent#before_fork", Timing.new(1, 0, 0, 0, 1))
      reader.pull
      forked_at = Process.clock_gettime(Process::CLOCK_REALTIME, :nanosecond)
      pid = fork do
        GVLScope::Breakdown.record(:route, "Child#only", Timing.new(1, 0, 0, 0, 1))
        reader.reset
        reader.pull
        waits = reader.metric_snapshots.find { |m| m.name == "gvlscope.route.gvl.wait" }
        held = reader.metric_snapshots.find { |m| m.name == "gvlscope.gvl.held" }.data_points.first
        puts waits.data_points.map { |p| p.attributes["route"] }.inspect
        puts waits.data_points.first.start_time_unix_nano >= forked_at
        puts held.start_time_unix_nano >= forked_at
        $stdout.flush
        exit!(0)
      end
      Process.wait(pid)
    RUBY
    assert status.success?, err
    assert_equal ['["Child#only"]', "true", "true"], out.lines.map(&:chomp)
  end
end
