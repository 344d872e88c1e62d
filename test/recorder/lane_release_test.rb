# frozen_string_literal: true

require "test_helper"
require "tmpdir"

# Each native thread that records holds a 64 KiB chunk (its lane's). Lanes of native threads that
# had exited kept theirs until stop: 200 short-lived threads with a 2 MiB buffer (32 chunks) ran
# the pool dry and dropped events, and the flight recorder lost a thread's events. A native thread
# now gives its chunk back at its thread's EXITED: however many threads come and go, only the
# threads alive at once need chunks.
class LaneReleaseTest < Minitest::Test
  include GVLScopeTestHelper

  THREADS = 200

  def test_short_lived_threads_do_not_exhaust_a_small_buffer
    Dir.mktmpdir("gvlscope-lanes") do |dir|
      path = File.join(dir, "t.gvl")
      out, err, status = run_ruby(<<~RUBY, path, timeout: 60)
        require "gvlscope"
        GVLScope.start(ARGV[0], buffer_bytes: 2 << 20)
        # Pauses let the drain thread write the exited threads' chunks: under CPU load it can lag,
        # and 32 chunks waiting for it are a full buffer (a counted drop, not this bug). Lanes that
        # kept their chunks would run the pool dry at the 32nd thread whatever the pauses.
        #{THREADS / 8}.times do
          8.times { Thread.new { sleep 0.001 }.join }
          sleep 0.1
        end
        s = GVLScope.stop
        puts s.events, s.dropped
      RUBY
      assert status.success?, err
      events, dropped = out.lines.map(&:to_i)
      assert_equal 0, dropped, "events dropped for want of chunks"
      trace = GVLScope::Model::TraceFile.read(path)
      assert_equal events, trace.records # events, and the stack records of a trace with stacks
      assert_equal THREADS, trace.kinds.count(:exited), "every thread's EXITED is in the trace"
    end
  end

  def test_the_flight_recorder_keeps_every_short_lived_thread
    Dir.mktmpdir("gvlscope-lanes") do |dir|
      out, err, status = run_ruby(<<~RUBY, timeout: 60)
        require "gvlscope"
        # 1 MiB: 16 chunks, of which the ring keeps at most 12.
        GVLScope::FlightRecorder.start(dir: #{dir.inspect}, buffer_bytes: 1 << 20, seconds: 60, signal: nil)
        100.times { Thread.new { sleep 0.001 }.join }
        dump = GVLScope::FlightRecorder.dump("test")
        GVLScope::FlightRecorder.stop
        puts dump.path, dump.events, dump.records, dump.dropped
      RUBY
      assert status.success?, err
      path, events, records, dropped = out.lines.map(&:chomp)
      trace = GVLScope::Model::TraceFile.read(path)
      assert_equal 0, dropped.to_i
      assert_equal [events.to_i, records.to_i], [trace.size, trace.records]
      assert_equal 100, trace.kinds.count(:exited), "every thread's EXITED is in the dump"
    end
  end
end
