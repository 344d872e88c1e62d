# frozen_string_literal: true

require "test_helper"
require "tmpdir"

# An interrupt (Thread#raise, Timeout, Ctrl-C) that arrives while stop or a dump waits without the
# GVL is raised when the wait returns. It used to leave the recorder half stopped (the trace still
# "running" or "stopping", its fd open, the dump flag set) and every later start, stop and dump
# refused. Debug delays (ext/gvlscope/debug.c) hold the no-GVL wait open long enough for the raise.
class InterruptTest < Minitest::Test
  include GVLScopeTestHelper

  def run_child(body)
    Dir.mktmpdir("gvlscope-interrupt") do |dir|
      out, err, status = run_ruby(<<~RUBY, dir, timeout: 60)
        require "gvlscope"
        require "timeout"
        dir = ARGV[0]
        # Raises in +thread+ once it is inside the delayed no-GVL wait.
        def interrupt(thread)
          sleep 0.1
          thread.raise(Interrupt, "interrupted")
          thread.join
        rescue Interrupt => e
          e
        end
        GVLScope::Native.debug_nogvl_delay_us = 300_000
        #{body}
        GVLScope::Native.debug_nogvl_delay_us = 0
      RUBY
      assert status.success?, err
      yield out.lines.map(&:chomp), dir
    end
  end

  def test_an_interrupted_stop_finishes_the_trace_and_a_new_one_starts
    run_child(<<~RUBY) do |lines, dir|
      GVLScope.start(File.join(dir, "a.gvl"))
      stopper = Thread.new { GVLScope.stop }
      puts interrupt(stopper).class
      puts GVLScope.tracing?
      GVLScope::Native.debug_nogvl_delay_us = 0
      GVLScope.start(File.join(dir, "b.gvl"))
      Thread.new { sleep 0.01 }.join
      puts GVLScope.stop.events.positive?
    RUBY
      assert_equal %w[Interrupt false true], lines
      # The interrupted trace was finished all the same: complete, with its end record.
      refute GVLScope::Model::TraceFile.read(File.join(dir, "a.gvl")).truncated?
    end
  end

  def test_a_timeout_around_stop_does_not_wedge_the_recorder
    run_child(<<~RUBY) do |lines, _dir|
      GVLScope.start(File.join(dir, "a.gvl"))
      begin
        Timeout.timeout(0.1) { GVLScope.stop }
      rescue Timeout::Error
        puts "timeout"
      end
      GVLScope::Native.debug_nogvl_delay_us = 0
      GVLScope.start(File.join(dir, "b.gvl"))
      GVLScope.stop
      puts "restarted"
    RUBY
      assert_equal %w[timeout restarted], lines
    end
  end

  def test_an_interrupted_dump_leaves_the_flight_recorder_usable
    run_child(<<~RUBY) do |lines, dir|
      GVLScope::FlightRecorder.start(dir: dir, signal: nil, min_interval: 0)
      Thread.new { sleep 0.01 }.join
      dumper = Thread.new { GVLScope::Native.flight_dump(File.join(dir, "d1.gvl")) }
      puts interrupt(dumper).class
      GVLScope::Native.debug_nogvl_delay_us = 0
      puts GVLScope::FlightRecorder.dump("again").events.positive?
      GVLScope::FlightRecorder.stop
      GVLScope::FlightRecorder.start(dir: dir, signal: nil)
      GVLScope::FlightRecorder.stop
      puts "restarted"
    RUBY
      assert_equal %w[Interrupt true restarted], lines
      refute GVLScope::Model::TraceFile.read(File.join(dir, "d1.gvl")).truncated?
    end
  end
end
