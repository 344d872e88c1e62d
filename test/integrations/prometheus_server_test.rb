# frozen_string_literal: true

require_relative "../test_helper"
require_relative "../support/process_group"
require "json"
require "net/http"
require "socket"
require "tmpdir"
require "fileutils"
require_relative "../support/puma_process"
require_relative "../support/prometheus_server"

# Prometheus for real: Debian's `prometheus` server (a temporary config and data directory, a free
# loopback port, a scrape a second) scrapes a real Puma cluster's /metrics (plugin :gvlscope, two
# workers, per-route series) and evaluates contrib/prometheus/gvlscope.rules.yml. What its HTTP API
# answers is what the scrape said: every series with its labels (plus Prometheus's job and
# instance), every type, every value between the scrape just before and the one just after, the
# request counts exactly; and the recording rules have values. script/test installs prometheus;
# without it the test skips.
class PrometheusServerTest < Minitest::Test
  include PumaProcess
  include PrometheusServer
  include GVLScopeTestHelper

  APP = File.join(ROOT, "test/fixtures/web/app.ru")
  RULES = File.join(ROOT, "contrib/prometheus/gvlscope.rules.yml")
  JOB = "gvlscope"

  def setup
    unless PrometheusServer.available?
      skip "prometheus is not installed (Debian's prometheus package: script/test installs it)"
    end
    @dir = Dir.mktmpdir("gvlscope-prometheus")
    @puma = nil
    @prometheus = nil
  end

  def teardown
    stop(@puma) if @puma
    stop_prometheus
    FileUtils.rm_rf(@dir) if @dir
  end

  def start_puma
    start_puma_in(@dir, <<~RUBY, booted: /(Worker \d+ \(PID: \d+\) booted.*){2}/m) { |server| @puma = server }
      threads 3, 3
      workers 2
      rackup #{APP.inspect}
      environment "test"
      plugin :gvlscope
      gvlscope log_interval: 0, prometheus_port: 0
    RUBY
    @puma.metrics_port = Integer(@puma.log[%r{GVL metrics on http://127\.0\.0\.1:(\d+)/metrics}, 1])
  end

  # What Puma's /metrics says now, parsed by the strict parser: [types, {[name, labels] => value}].
  def scrape
    text = Net::HTTP.get_response(URI("http://127.0.0.1:#{@puma.metrics_port}/metrics")).body
    parsed = PrometheusText.parse(text)
    [parsed.types, parsed.values.to_h { |name, labels, value| [key(name, labels), value] }]
  end

  # A series' name and labels, the bucket bound as a number (Prometheus keeps le's text; the
  # number is what it means).
  def key(name, labels)
    labels = labels.except("job", "instance", "__name__")
    labels["le"] = number(labels["le"]) if labels.key?("le")
    [name, labels.sort.to_h]
  end

  def get(path) = Net::HTTP.get_response(URI("http://127.0.0.1:#{@puma.port}#{path}"))

  def test_prometheus_scrapes_the_plugin_and_answers_what_it_said
    start_puma
    sent = { "/fast" => 12, "/cpu?cpu_ms=20" => 4 }
    sent.each { |path, count| Array.new(count) { Thread.new { assert_equal "200", get(path).code } }.each(&:join) }
    # Every request counted in the master's view (the workers report once a second).
    await("the requests on /metrics") do
      scrape.last.select { |(name, _), _| name == "gvlscope_route_requests_total" }.values.sum == sent.values.sum
    end
    port = start_prometheus("127.0.0.1:#{@puma.metrics_port}", job: JOB, rules: RULES)

    # Prometheus scraped it, and a scrape after ours is in: its values come after ours.
    await("a scrape of the target") do
      api("/api/v1/query", query: %(up{job="#{JOB}"})).dig("result", 0, "value", 1) == "1"
    end
    types, before = scrape
    after_ours = Time.now.to_f
    selector = %({__name__=~"gvlscope_.+",job="#{JOB}"})
    series = await("a scrape after ours") do
      result = api("/api/v1/query", query: "#{selector}[10s]")["result"]
      result unless result.empty? || result.map { |s| s["values"].last[0].to_f }.min <= after_ours
    end
    _, later = scrape

    stored = series.to_h do |s|
      assert_equal [JOB, "127.0.0.1:#{@puma.metrics_port}"], s["metric"].values_at("job", "instance")
      [key(s["metric"]["__name__"], s["metric"]), number(s["values"].last[1])]
    end

    # The same series: those of our scrape before, at most those of the one after (a histogram
    # grows buckets as longer holds and waits come).
    assert_empty before.keys - stored.keys, "series Prometheus does not have"
    assert_empty stored.keys - later.keys, "series Puma never exported"
    workers = stored.keys.filter_map { |name, labels| labels["worker"] if name == "gvlscope_wall_seconds_total" }
    assert_equal %w[0 1], workers.sort
    routes = stored.keys.filter_map { |name, labels| labels["route"] if name == "gvlscope_route_requests_total" }.uniq
    refute_empty routes

    # Values: counters (and histograms' parts) between the two scrapes; the request counts exactly.
    family = ->(name) { types.key?(name) ? name : name.sub(/_(bucket|sum|count)\z/, "") }
    stored.each do |(name, labels), value|
      type = types.fetch(family.call(name)) { flunk "#{name}: no TYPE in the scrape" }
      if type == "gauge"
        assert_operator value, :>=, 0, name
        assert_operator value, :<=, 1.0 + 1e-9, name if name == "gvlscope_gvl_held_ratio"
      else
        low = before.fetch([name, labels], 0)
        high = later.fetch([name, labels])
        assert_operator value, :>=, low, "#{name}#{labels}: below the scrape before"
        assert_operator value, :<=, high, "#{name}#{labels}: above the scrape after"
      end
    end
    requests = stored.select { |(name, _), _| name == "gvlscope_route_requests_total" }
    assert_equal sent.values.sum, requests.values.sum
    requests.each { |k, v| assert_equal before.fetch(k), v, "#{k}: a finished request count is the scrape's exactly" }

    # Prometheus read the types from the exposition.
    metadata = api("/api/v1/metadata")
    types.each { |name, type| assert_equal type, metadata.dig(name, 0, "type"), "#{name}'s TYPE" }

    # The recording rules evaluate on these series: per worker, per route.
    held = await("the recording rules") do
      result = api("/api/v1/query", query: "process:gvlscope_gvl_held:ratio_rate5m")["result"]
      result if result.size == 2
    end
    held.each do |s|
      assert_equal JOB, s["metric"]["job"]
      assert_includes %w[0 1], s["metric"]["worker"]
      assert_includes 0.0..(1.0 + 1e-9), number(s["value"][1]), s.inspect
    end
    route_rate = api("/api/v1/query", query: "job_route:gvlscope_route_requests:rate5m")["result"]
    assert_equal routes.sort, route_rate.map { |s| s["metric"]["route"] }.sort
    p99 = api("/api/v1/query", query: "job_route:gvlscope_route_gvl_wait_seconds:p99_rate5m")["result"]
    assert_equal routes.sort, p99.map { |s| s["metric"]["route"] }.sort
    rules = api("/api/v1/rules")["groups"].flat_map { |group| group["rules"] }
    assert(rules.all? { |rule| rule["health"] == "ok" }, rules.reject { |rule| rule["health"] == "ok" }.inspect)
    assert_equal port, @prometheus[2]
  end
end
