# frozen_string_literal: true

require "test_helper"
require "tmpdir"

# The recorder under load, for the sanitizer job (script/sanitize runs this file, with the C
# extension built with ASan and UBSan) and the normal suite alike: Ractors x threads with
# concurrent snapshots, start/stop loops with threads coming and going, fork, thread churn.
# Each scenario runs in a child Ruby (Ractors, forks); a sanitizer report aborts the child, so
# these assertions fail on any memory error. Sizes keep each under a few seconds.
class StressTest < Minitest::Test
  include GVLScopeTestHelper

  def run_stress(code, timeout: 60)
    out, err, status = run_ruby("Warning[:experimental] = false\nrequire 'gvlscope'\nrequire #{RACTOR_RESULT.inspect}\n#{code}", timeout: timeout)
    assert status.success?, "exit #{status.inspect}\n#{err}"
    refute_match(/ERROR: AddressSanitizer|runtime error:/, err)
    out
  end

  def test_ractors_and_threads_with_concurrent_snapshots_and_exits
    out = run_stress(<<~RUBY)
      GVLScope::Metrics.enable
      stop_at = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 1.5
      # Thread.pass, not IO or sleep: those hang non-main Ractors' threads in CRuby now and then.
      # Long-lived threads in the Ractors (the shape of test/recorder/metrics_ractor_test.rb: thread churn
      # inside non-main Ractors hung CRuby now and then here), churn in the main Ractor.
      ractors = 3.times.map do
        Ractor.new(stop_at) do |deadline|
          4.times.map do
            Thread.new do
              passes = 0
              (Thread.pass; passes += 1) while Process.clock_gettime(Process::CLOCK_MONOTONIC) < deadline
              passes
            end
          end.sum(&:value)
        end
      end
      churn = Thread.new do
        Thread.new { Thread.pass }.join while Process.clock_gettime(Process::CLOCK_MONOTONIC) < stop_at
      end
      GVLScope::Metrics.snapshot while Process.clock_gettime(Process::CLOCK_MONOTONIC) < stop_at
      rounds = ractors.sum { |ractor| RactorResult.of(ractor) }
      churn.join
      GVLScope::Metrics.snapshot
      puts rounds
    RUBY
    assert_operator out.to_i, :>, 0
  end

  def test_start_stop_loops_with_thread_churn
    Dir.mktmpdir("gvlscope-stress") do |dir|
      out = run_stress(<<~RUBY)
        churn = Thread.new { 400.times { Thread.new { sleep 0.0005 }.join } }
        60.times do |i|
          path = File.join(#{dir.inspect}, "t\#{i}.gvl")
          GVLScope.start(path, buffer_bytes: 1 << 20)
          3.times { Thread.new { Thread.pass }.join }
          GVLScope.stop
          File.delete(path)
          GVLScope.measure { Thread.pass } if i.even?
        end
        churn.join
        GVLScope::FlightRecorder.start(dir: #{dir.inspect}, buffer_bytes: 1 << 20, signal: nil, min_interval: 0)
        20.times { Thread.new { sleep 0.0005 }.join; GVLScope::FlightRecorder.dump("stress") }
        GVLScope::FlightRecorder.stop
        puts GVLScope::Native.debug_registry_size
      RUBY
      assert_operator out.to_i, :<=, 3
    end
  end

  def test_fork_while_tracing_and_measuring
    Dir.mktmpdir("gvlscope-stress") do |dir|
      out = run_stress(<<~RUBY)
        GVLScope::Metrics.enable
        GVLScope.start(File.join(#{dir.inspect}, "parent.gvl"), buffer_bytes: 4 << 20)
        busy = 2.times.map { Thread.new { 2000.times { Thread.pass } } }
        pids = 6.times.map do
          fork do
            GVLScope.start(File.join(#{dir.inspect}, "child-\#{Process.pid}.gvl"), buffer_bytes: 1 << 20)
            Thread.new { Thread.pass }.join
            GVLScope.stop
            GVLScope::Metrics.snapshot
          end
        end
        statuses = pids.map { |pid| Process.wait2(pid).last.success? }
        busy.each(&:join)
        GVLScope.stop
        puts statuses.all?
      RUBY
      assert_equal "true", out.lines.last.chomp
    end
  end
end
