# frozen_string_literal: true

require "test_helper"
require "stringio"
require "time"
require "tmpdir"
require_relative "../../bench/wait_truth_load"

# bench/wait_truth.rb and bench/wait_truth_load.rb at a tiny size on a real Puma 8 (single mode,
# new and kept-alive connections; cluster mode under wrk's load) and a real Sidekiq 8 with Redis:
# gvlscope's decomposition of each request or job fits inside what the client measured. Physical
# bounds only (a loaded machine stretches every latency alike); the harnesses themselves are
# where the 80 % target is measured.
class WaitTruthTest < Minitest::Test
  def within_clock_error(ms) = WaitTruth.within_clock_error(ms)

  # Every response keeps the invariants: gvl-wait <= queue + app time <= client latency.
  def assert_invariants(samples)
    samples.each do |sample|
      assert_operator sample.parts.keys, :include?, "gvl-wait", sample.inspect
      assert_empty WaitTruth.broken_invariants(sample.parts, sample.latency_ms), sample.inspect
    end
  end

  def test_puma_8_single_each_requests_parts_fit_in_the_clients_latency
    result = Dir.mktmpdir("wait-truth") { |dir| WaitTruth.run("puma8-single-2", tries: 2, seed: 1, dir: dir) }

    assert_equal [2, 2], [result.beside.size, result.alone.size]
    (result.beside + result.alone).each do |sample|
      # The pool thread is woken after the connection arrived, so every part of the request's
      # time, its wait before the app included, lies between the client's send and its read.
      parts = sample.parts.slice("gvl-wait", "gvl-run", "idle", "gc")
      assert_operator parts.keys, :include?, "gvl-wait", sample.inspect
      assert_operator parts.values.sum, :<=, within_clock_error(sample.latency_ms), sample.inspect
    end
    # The quick request went out at least 20 ms after its neighbour (a sleep never ends early).
    result.beside.each { |sample| assert_operator sample.offset_ms, :>=, 20.0, sample.inspect }
    assert_invariants(result.beside + result.alone)
    table = StringIO.new
    WaitTruth::Table.tries(result, table)
    assert_match(/^== puma8-single-2 fresh: Puma 8\.\d+\.\d+, single, 2 threads; new connections$/, table.string)
    assert_equal 4, table.string.lines.size, table.string # the server, the header, 2 tries
  end

  # A request on a reused connection comes through Puma's reactor (issue 36): its wait there is
  # the request's, and within what its client measured.
  def test_puma_8_single_keep_alive_requests_keep_the_invariants
    result = Dir.mktmpdir("wait-truth") do |dir|
      WaitTruth.run("puma8-single-2", tries: 2, seed: 1, dir: dir, connection: "keepalive")
    end

    assert_equal "puma8-single-2 keepalive", result.server
    assert_equal [2, 2], [result.beside.size, result.alone.size]
    assert_invariants(result.beside + result.alone)
  end

  # Cluster mode under continuous traffic: wrk's keep-alive requests (quick and CPU-bound) and the
  # probe's (new connections, a Net::HTTP session, curl's several URLs on one connection).
  def test_puma_8_cluster_under_wrk_every_response_keeps_the_invariants
    skip "wrk is not installed (script/test installs it)" unless system("command -v wrk >/dev/null")
    _description, runs = Dir.mktmpdir("wait-truth-load") do |dir|
      WaitTruth::Load.measure("puma8-cluster", concurrencies: [4], seconds: 2, seed: 1, dir: dir,
                              alone_probes: 1, alone_seconds: 1)
    end

    assert_equal [0, 4], runs.map(&:concurrency)
    loaded = runs.last.samples.map { |sample| sample.extra[:kind] }.uniq.sort
    assert_equal %w[curl-fresh curl-keepalive fresh keepalive wrk-cpu wrk-quick], loaded
    runs.each { |run| assert_invariants(run.samples) }
  end

  def test_sidekiq_8_each_jobs_parts_fit_between_its_push_and_gvlscopes_line
    skip "redis-server is not installed (script/test installs it)" unless RedisServer.available?
    result = Dir.mktmpdir("wait-truth") { |dir| WaitTruth.run("sidekiq8", tries: 3, seed: 1, dir: dir, quick_jobs: 3) }

    assert_equal [3, 3], [result.beside.size, result.alone.size]
    (result.beside + result.alone).each do |sample|
      # GVLScope::Sidekiq logs its line after the job's timing ended, and the job was pushed
      # before any of it began: the line's time (ms, truncated) less the push bounds all parts.
      pushed_at = sample.extra.fetch(:pushed_at)
      logged_after_push_ms = (Time.iso8601(sample.extra.fetch(:logged_at)).to_f - pushed_at) * 1000 + 1
      parts = sample.parts.slice("wait", "run", "idle", "gc")
      assert_equal %w[gc idle run wait], parts.keys.sort, sample.inspect
      assert_operator parts.values.sum, :<=, within_clock_error(logged_after_push_ms), sample.inspect
      # The job's end (CLOCK_REALTIME in perform) lies between its push and gvlscope's line.
      assert_operator sample.latency_ms, :>, 0, sample.inspect
      assert_operator sample.latency_ms, :<=, logged_after_push_ms, sample.inspect
      assert_operator sample.extra.fetch(:elapsed_ms), :>=, 0, sample.inspect
    end
  end
end
