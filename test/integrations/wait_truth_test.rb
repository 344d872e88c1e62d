# frozen_string_literal: true

require "test_helper"
require "stringio"
require "time"
require "tmpdir"
require_relative "../../bench/wait_truth"

# bench/wait_truth.rb at a tiny size on a real Puma 8 (single mode) and a real Sidekiq 8 with
# Redis: gvlscope's decomposition of each quick request or job fits inside what the client
# measured. Physical bounds only (a loaded machine stretches every latency alike); the harness
# itself is where the 80 % target is measured.
class WaitTruthTest < Minitest::Test
  # gvlscope's clock is the TSC calibrated against CLOCK_MONOTONIC over 2 ms at load
  # (ext/gvlscope/clock.c): its rate may be off by a few tenths of a percent.
  def within_clock_error(ms) = ms * 1.01 + 0.5

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
    table = StringIO.new
    WaitTruth::Table.tries(result, table)
    assert_match(/^== puma8-single-2: Puma 8\.\d+\.\d+, single, 2 threads$/, table.string)
    assert_equal 4, table.string.lines.size, table.string # the server, the header, 2 tries
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
