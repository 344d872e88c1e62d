# frozen_string_literal: true

require "test_helper"
require "tmpdir"
require "gvlscope/model"
require "gvlscope/analysis"
require "gvlscope/formats"
require "gvlscope/cli"
require "support/reference_timeline"

# Holds are wall time: a holder the OS keeps off a CPU (an overloaded machine, issue 37's "Long
# hold … 7,435 ms in one stretch" at load 17) still holds the GVL. A trace of format version 3
# carries the drain thread's samples of each native thread's CPU time (CPU chunks); the engine
# takes from a hold what its native thread measurably did not run between the samples inside it.
# Traces written here with GvlWriter: exact, whatever the machine.
class OffCPUTest < Minitest::Test
  MS = 1_000_000

  # 'tp 1' (a pool thread) holds the GVL from 0 to 1000 ms while 'srv' waits for it from 0; the
  # drain thread sampled tp 1's native thread every 100 ms, its CPU time growing +cpu_ms_per_tick+.
  def write_trace(dir, cpu_ms_per_tick:, load_milli: 17_000)
    path = File.join(dir, "t#{cpu_ms_per_tick.inspect}.gvl")
    File.open(path, "wb") do |io|
      writer = GVLScope::Model::GvlWriter.new(io, pid: 1, timeslice_ns: 100 * MS)
      [[0, :started, 1], [0, :ready, 1], [0, :started, 2], [0, :ready, 2], [0, :resumed, 1],
       [1000, :suspended, 1], [1000, :resumed, 2], [1005, :suspended, 2]].each do |ms, kind, serial|
        writer.add(ms * MS, kind, serial)
      end
      cpu_ms_per_tick&.then do |per_tick|
        (0..12).each { |tick| writer.cpu(tick * 100 * MS, { 1 => (5 + [tick, 10].min * per_tick) * MS, 2 => 3 * MS }) }
      end
      info = [[1, "tp 1"], [2, "srv"]].map { |serial, name| GVLScope::Model::ThreadInfo.new(serial: serial, name: name, ractor_id: 1) }
      writer.finish(threads: info, end_ns: 1300 * MS, cpus: 2, load_milli: load_milli)
    end
    path
  end

  def report(path) = GVLScope::Analysis::Report.new(GVLScope::Model::Scan.open(path))

  def test_a_hold_mostly_off_a_cpu_says_so_in_the_long_hold_finding
    Dir.mktmpdir("gvlscope-off-cpu") do |dir|
      report = report(write_trace(dir, cpu_ms_per_tick: 30))
      assert_equal [:long_hold], report.findings.map(&:kind)
      hold = report.findings.first
      assert_equal "Long hold: a request or job held the GVL 1000 ms in one stretch (1000 ms from its first hold to its " \
                   "last, on 'tp 1'; no other such stretch), of which 300 ms running on a CPU: the OS kept it off a CPU " \
                   "for the rest (the machine was overloaded: load 17.0 on 2 CPUs), while 1 other thread waited " \
                   "1000 ms for it ('srv' 1000 ms)", hold.title
      assert_equal({ longest_streak_held_ns: 1000 * MS, longest_streak_off_cpu_ns: 700 * MS, long_streak_off_cpu_ns: 700 * MS },
                   hold.evidence.slice(:longest_streak_held_ns, :longest_streak_off_cpu_ns, :long_streak_off_cpu_ns))
      tp = report.all_rows.find { |row| row.label == "tp 1" }
      assert_equal [1000 * MS, 700 * MS], [tp.run_ns, tp.held_off_cpu_ns]
    end
  end

  # The threshold is running time: 20 ms on a CPU in a 1000 ms hold is no long hold; the same
  # events without CPU samples (an older trace) or with a CPU all along are.
  def test_the_long_hold_threshold_counts_running_time_only
    Dir.mktmpdir("gvlscope-off-cpu") do |dir|
      starved = report(write_trace(dir, cpu_ms_per_tick: 2))
      assert_empty starved.findings.map(&:kind)
      assert_equal [0, 980 * MS], [starved.all_rows.first.long_streaks, starved.all_rows.first.held_off_cpu_ns]
      assert_equal [:long_hold], report(write_trace(dir, cpu_ms_per_tick: nil)).findings.map(&:kind)
      running = report(write_trace(dir, cpu_ms_per_tick: 100)).findings
      assert_equal [:long_hold], running.map(&:kind)
      refute_includes running.first.title, "off a CPU" # nothing measured off a CPU: the title as before
    end
  end

  # The engine (Model::Scan) takes the same off-CPU time from the same holds as the plain Ruby
  # reference (test/support/reference_timeline.rb).
  def test_the_engine_and_the_reference_agree
    Dir.mktmpdir("gvlscope-off-cpu") do |dir|
      [2, 30, 100, nil].each do |per_tick|
        path = write_trace(dir, cpu_ms_per_tick: per_tick)
        reference = ReferenceReport.new(ReferenceTimeline.open(path))
        assert_equal reference.all_rows.map(&:to_h), report(path).all_rows.map(&:to_h), "#{per_tick.inspect} ms a tick"
        assert_equal reference.findings.map(&:to_h), report(path).findings.map(&:to_h), "#{per_tick.inspect} ms a tick"
      end
    end
  end

  def test_the_thread_table_shows_the_off_cpu_part_only_for_traces_that_sampled_it
    Dir.mktmpdir("gvlscope-off-cpu") do |dir|
      text = GVLScope::Formats::ReportText.new(report(write_trace(dir, cpu_ms_per_tick: 30))).to_s
      header = text.lines.find { |line| line.start_with?("thread ") }
      assert_match(/ gc +off CPU longest wait /, header)
      assert_match(/^tp 1 +1000\.0 ms +0\.0 ms +\d+\.\d ms +0\.0 ms +700\.0 ms /, text)
      assert_includes text, GVLScope::Formats::ThreadTable::OFF_CPU
      json = JSON.parse(GVLScope::Formats::ReportJSON.new(report(write_trace(dir, cpu_ms_per_tick: 30))).to_s)
      assert_equal [700 * MS, 5 * MS], json["threads"].map { |row| row["held_off_cpu_ns"] }
      old = GVLScope::Formats::ReportText.new(report(write_trace(dir, cpu_ms_per_tick: nil))).to_s
      refute_includes old, "off CPU"
      assert_nil JSON.parse(GVLScope::Formats::ReportJSON.new(report(write_trace(dir, cpu_ms_per_tick: nil))).to_s)["threads"].first["held_off_cpu_ns"]
    end
  end

  # A hold between two ticks (10-190 ms; ticks at 0, 100, 200) ran at most what its native
  # thread's CPU time grew from the tick before it to the tick after it: 2 ms, so 178 ms off a
  # CPU. A thread that ran as fast as the wall clock around the hold has nothing off a CPU.
  def test_a_hold_between_two_ticks_is_bounded_by_the_ticks_around_it
    Dir.mktmpdir("gvlscope-off-cpu") do |dir|
      { 1 => 178 * MS, 100 => 0 }.each do |cpu_ms_per_tick, off|
        path = File.join(dir, "short#{cpu_ms_per_tick}.gvl")
        File.open(path, "wb") do |io|
          writer = GVLScope::Model::GvlWriter.new(io, pid: 1, timeslice_ns: 100 * MS)
          [[10, :ready], [10, :resumed], [190, :suspended]].each { |ms, kind| writer.add(ms * MS, kind, 1) }
          [0, 100, 200].each { |ms| writer.cpu(ms * MS, { 1 => (1 + ms / 100 * cpu_ms_per_tick) * MS }) }
          writer.finish(threads: [GVLScope::Model::ThreadInfo.new(serial: 1, name: "w 1", ractor_id: 1)], end_ns: 300 * MS)
        end
        assert_equal [180 * MS, off], report(path).all_rows.first.then { |row| [row.run_ns, row.held_off_cpu_ns] }
        assert_equal ReferenceReport.new(ReferenceTimeline.open(path)).all_rows.map(&:to_h), report(path).all_rows.map(&:to_h)
      end
    end
  end
end

class OffCPUCorruptTest < Minitest::Test
  include GVLScopeTestHelper

  def trace_with_cpu_chunk(dir, body)
    path = File.join(dir, "c.gvl")
    File.open(path, "wb") do |io|
      writer = GVLScope::Model::GvlWriter.new(io, pid: 1, timeslice_ns: 100_000_000)
      writer.add(0, :resumed, 1)
      io.write([5, body.bytesize].pack("L<L<"), body)
      writer.finish(threads: [], end_ns: 1_000)
    end
    path
  end

  def test_a_corrupt_cpu_chunk_is_one_clear_line
    Dir.mktmpdir("gvlscope-off-cpu") do |dir|
      {
        [7, 2, 0].pack("Q<L<L<") + [1, 0, 5].pack("L<L<Q<") => /CPU chunk of 32 bytes claims 2 samples at byte 48/,
        [7, 1, 0].pack("Q<L<L<") + [1, 0, 2**63].pack("L<L<Q<") => /CPU time of 9223372036854775808 ns \(over 146 years\) at byte 48/,
        [2**62, 0, 0].pack("Q<L<L<") => /CPU chunk at 4611686018427387904 ns \(over 146 years\) at byte 48/,
        "short" => /CPU chunk of 5 bytes, shorter than its header at byte 48/,
      }.each do |body, message|
        path = trace_with_cpu_chunk(dir, body)
        out, err, status = gvlscope_in_process("report", path)
        assert_equal [1, ""], [status, out], err
        assert_match(/\Agvlscope: #{Regexp.escape(path)}: #{message.source}/, err)
        assert_equal 1, err.lines.size, err
        File.unlink(path)
      end
    end
  end
end
