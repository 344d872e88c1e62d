# frozen_string_literal: true

require "test_helper"
require "json"
require "net/http"
require "tmpdir"
require_relative "../support/puma_process"
require_relative "../support/prometheus_server"

# GVLScope::Yabeda for real: a real Puma serving test/fixtures/web/yabeda.ru (GVLScope::Rack,
# GVLScope::Yabeda's histograms on yabeda-prometheus' /metrics, a job run through
# EventLoops.measure_job), scraped by a real Prometheus server. What Prometheus stored for each
# route and job is what the requests' and the job's RequestTiming said: each histogram's count,
# its sum (the figures added up, in seconds), and the bucket each one fell in.
class YabedaTest < Minitest::Test
  include PumaProcess
  include PrometheusServer
  include GVLScopeTestHelper

  APP = File.join(ROOT, "test/fixtures/web/yabeda.ru")
  JOB = "gvlscope_yabeda"
  FIGURES = { "gvl_wait" => "wait_ns", "run" => "run_ns", "idle" => "idle_ns", "gc" => "gc_ns" }.freeze

  def setup
    skip "prometheus is not installed (Debian's prometheus package: script/test installs it)" unless PrometheusServer.available?
    @dir = Dir.mktmpdir("gvlscope-yabeda")
    @log = File.join(@dir, "callbacks.jsonl")
    @puma = nil
    @prometheus = nil
  end

  def teardown
    stop(@puma) if @puma
    stop_prometheus
    FileUtils.rm_rf(@dir) if @dir
  end

  def start_puma
    start_puma_in(@dir, <<~RUBY, env: { "GVLSCOPE_CALLBACK_LOG" => @log }) { |server| @puma = server }
      threads 2, 2
      rackup #{APP.inspect}
      environment "test"
    RUBY
  end

  def get(path, id)
    response = Net::HTTP.start("127.0.0.1", @puma.port, open_timeout: 10, read_timeout: 30) do |http|
      http.request(Net::HTTP::Get.new(path, "x-id" => id))
    end
    assert_equal "200", response.code, "#{path}: #{response.body}"
  end

  # What Prometheus stored last for +name+: {labels without job and instance => value}.
  def stored(name)
    api("/api/v1/query", query: %(#{name}{job="#{JOB}"}))["result"].to_h do |s|
      assert_equal "127.0.0.1:#{@puma.port}", s["metric"]["instance"]
      [s["metric"].except("__name__", "job", "instance"), number(s["value"][1])]
    end
  end

  # Each histogram's count and sum as the figures of +timings+ (in order: the sum is added up as
  # the exporter added it), and each bucket's count: those at most its bound.
  def assert_histogram(name, tags, values)
    assert_equal values.size, stored("#{name}_count").fetch(tags), "#{name}#{tags}: count"
    sum = values.sum(0.0)
    assert_in_delta sum, stored("#{name}_sum").fetch(tags), 1e-12 + sum * 1e-12, "#{name}#{tags}: sum of #{values}"
    buckets = stored("#{name}_bucket").select { |labels, _| labels.except("le") == tags }
    refute_empty buckets, name
    buckets.each do |labels, count|
      assert_equal values.count { |value| value <= number(labels["le"]) }, count, "#{name}#{labels}"
    end
  end

  def test_prometheus_stores_each_routes_and_jobs_figures_as_their_request_timing_said
    start_puma
    get("/orders/1?cpu_ms=5", "order-1")
    get("/orders/2?cpu_ms=20", "order-2")
    get("/health", "health")
    get("/report?id=report-1", "report")
    records = File.readlines(@log).map { |line| JSON.parse(line) }
    by_id = records.to_h { |record| [record["id"], record] }
    assert_equal %w[order-1 order-2 health report-1 report].sort, by_id.keys.sort, records.inspect

    start_prometheus("127.0.0.1:#{@puma.port}", job: JOB)
    await("a scrape with every request") do
      stored("gvlscope_web_request_gvl_wait_seconds_count").values.sum == 4
    end

    routes = { { "route" => "GET /orders/:id" } => %w[order-1 order-2], { "route" => "GET /health" } => %w[health],
               { "route" => "GET /report" } => %w[report] }
    assert_equal routes.keys.sort_by(&:to_s), stored("gvlscope_web_request_gvl_wait_seconds_count").keys.sort_by(&:to_s)
    routes.each do |tags, ids|
      FIGURES.each do |figure, field|
        assert_histogram("gvlscope_web_request_#{figure}_seconds", tags, ids.map { |id| by_id[id][field] / 1e9 })
      end
      queued = ids.filter_map { |id| by_id[id]["queue_ns"] }
      assert_histogram("gvlscope_web_request_queue_seconds", tags, queued.map { |ns| ns / 1e9 }) unless queued.empty?
    end
    # 20 ms of the thread's CPU time in Ruby: the run histogram's sum holds it (1 %: the clock's calibration).
    assert_operator stored("gvlscope_web_request_run_seconds_sum").fetch({ "route" => "GET /orders/:id" }), :>=, 0.99 * 0.025

    job = { "job_class" => "ReportJob", "queue" => "reports" }
    FIGURES.each do |figure, field|
      assert_histogram("gvlscope_background_job_#{figure}_seconds", job, [by_id["report-1"][field] / 1e9])
    end
    assert_histogram("gvlscope_background_job_queue_latency_seconds", job, [by_id["report-1"]["queue_latency_ns"] / 1e9])
    assert_operator by_id["report-1"]["queue_latency_ns"], :>=, 50e6
    assert_operator by_id["report-1"]["idle_ns"], :>=, 0.99 * 10e6
  end
end
