# frozen_string_literal: true

require "test_helper"
require "tmpdir"
require "gvlscope/analysis"
require "gvlscope/formats"
require "support/synthetic_trace"
require "support/reference_timeline"

# The report engine (ext/gvlscope_engine, Model::Scan: every command's reader) against the plain
# Ruby state machine it replaced (test/support/reference_timeline.rb, and the analysis of its
# intervals): on traces of real programs, the recorded fixtures and synthetic traces, every answer
# must be the same, and the report the same byte for byte. And its memory must not grow with the
# trace's events.
class EngineTest < Minitest::Test
  include GVLScopeTestHelper
  include ReferenceCheck

  # Programs whose traces cover the state machine's rules: convoys and hogs (preemptions), the
  # hand-off thrash, GC inside holds, locks, queues, joins and sleeps, threads created and
  # exiting all along, and M:N threads (native threads shared: the exports' native lanes).
  PROGRAMS = {
    "convoy" => 'GVLWorkloads.cpu_beside_reader("cpu", 12)',
    "thrash" => <<~RUBY,
      4.times.map do |n|
        Thread.new { File.open("/dev/zero") { |zero| 3000.times { zero.sysread(16) } } }
      end.each(&:join)
    RUBY
    "gc" => <<~RUBY,
      6.times.map do
        Thread.new { 40.times { Array.new(20_000) { |i| "s\#{i}" }; Thread.pass } }
      end.each(&:join)
    RUBY
    "locks" => <<~RUBY,
      queue = Queue.new
      lock = Mutex.new
      total = 0
      consumers = 3.times.map { Thread.new { while (item = queue.pop); lock.synchronize { total += item }; end } }
      200.times { |i| queue << i; sleep 0.0002 if (i % 20).zero?; Thread.new { lock.synchronize { total += 1 } }.join if (i % 25).zero? }
      3.times { queue << nil }
      consumers.each(&:join)
    RUBY
  }.freeze

  def setup
    @dir = Dir.mktmpdir("gvlscope-engine")
  end

  def teardown
    FileUtils.rm_rf(@dir)
  end

  def test_the_engine_agrees_with_the_reference_on_traced_programs
    PROGRAMS.each do |name, program|
      path = File.join(@dir, "#{name}.gvl")
      trace_program(path, program)
      assert_same_answers(path)
    end
  end

  # Under M:N threads several Ruby threads run on one native thread: the exports add native lanes.
  def test_the_engine_agrees_on_an_mn_threads_trace
    path = File.join(@dir, "mn.gvl")
    _out, err, status = run_ruby(<<~RUBY, path, env: { "RUBY_MN_THREADS" => "1" })
      require "gvlscope"
      GVLScope.trace(ARGV[0]) do
        8.times.map { Thread.new { 20.times { sleep 0.0005; 2000.times.sum } } }.each(&:join)
      end
    RUBY
    assert status.success?, err
    assert_same_answers(path)
  end

  def test_the_engine_agrees_on_the_recorded_fixtures_and_an_import
    Dir[File.join(ROOT, "test/fixtures/traces/*.{gvl,json}")].each { |path| assert_same_answers(path) }
  end

  def test_the_engine_agrees_on_a_synthetic_trace
    path = File.join(@dir, "synthetic.gvl")
    SyntheticTrace.write(path, events: 150_000)
    assert_same_answers(path)
  end

  # Report#detail's windows: every interval that overlaps each, first by start, then thread order.
  def test_detail_windows_are_the_references_intervals_in_the_window
    path = File.join(ROOT, "test/fixtures/traces/mixed.gvl")
    timeline = ReferenceTimeline.open(path)
    scan = GVLScope::Model::Scan.open(path)
    duration = timeline.duration_ns
    windows = [[0, duration / 10], [duration / 3, duration / 2], [duration - 1, duration], [duration, duration * 2]]
    [5, 1_000_000].each do |limit|
      expected = windows.map { |start_ns, end_ns| window(timeline, start_ns, end_ns, limit) }
      assert_equal expected, scan.details(windows, limit: limit).map { |found| found.map(&:to_a) }, "limit #{limit}"
    end
    assert_operator expected_size = window(timeline, 0, duration, 1_000_000).size, :>, 100
    assert_equal expected_size, scan.detail(0, duration, limit: 1_000_000).size
  end

  # The engine's own allocations (GVLScope::Engine counts every byte) are the same for a trace 10x
  # longer: per-thread sums, bounded buffers; medians exact up to a budget, a histogram beyond.
  # Ruby objects made for the report do not grow with it either.
  def test_memory_does_not_grow_with_the_events
    small = File.join(@dir, "small.gvl")
    large = File.join(@dir, "large.gvl")
    small_events = SyntheticTrace.write(small, events: 300_000)
    large_events = SyntheticTrace.write(large, events: 3_000_000)
    assert_operator large_events, :>=, 9 * small_events

    small_bytes, small_objects = measure(small)
    large_bytes, large_objects = measure(large)
    # What grows: the holder samples, 24 bytes each (at most ~100 a second of trace; here one per
    # ~24,000 events).
    assert_operator large_bytes, :<=, small_bytes + 64 * 1024,
                    "engine bytes: #{small_bytes} for #{small_events} events, #{large_bytes} for #{large_events}"
    assert_operator large_objects, :<=, small_objects * 1.5 + 5_000,
                    "Ruby objects: #{small_objects} for #{small_events} events, #{large_objects} for #{large_events}"
  end

  # Blame splits each wait among the holds it overlapped: a thread starved across a million holds
  # must not keep a million of them (runs of holds fold into per-holder sums), and the numbers stay
  # those of the reference (a wait that starts inside a hold, GC inside holds, two starved threads).
  def test_blame_holds_stay_bounded_for_a_starved_thread
    small = File.join(@dir, "starved-small.gvl")
    SyntheticTrace.write_starved(small, holds: 20_000)
    assert_same_answers(small)
    blame = GVLScope::Analysis::Report.new(GVLScope::Model::Scan.open(small)).blame.all_waits.to_a.to_h
    assert_equal({ 2 => 19_999_000, 3 => 19_999_250, hand_off: 6_002_000 }, blame.fetch(1), "thread 1 waited across all 20,000 holds")

    sizes = [100_000, 1_000_000].map do |holds|
      path = File.join(@dir, "starved-#{holds}.gvl")
      SyntheticTrace.write_starved(path, holds: holds)
      scan = GVLScope::Model::Scan.new(GVLScope::Model::Scan.read(path), exact_medians: 10_000).run
      GVLScope::Analysis::Report.new(scan).blame.all_waits.to_a
      FileUtils.rm_f(path)
      scan.peak_bytes
    end
    # 900,000 more holds kept one by one would be 29 MB more (32 bytes each).
    assert_operator sizes.last, :<=, sizes.first + 256 * 1024, "engine bytes: #{sizes.first} for 100,000 holds, #{sizes.last} for 1,000,000"
  end

  # Between chunks each pass tells GVLScope::Progress how far it got in the file (the bar of a
  # command that reads a big trace).
  def test_each_pass_tells_the_progress_how_far_it_got
    path = File.join(@dir, "progress.gvl")
    SyntheticTrace.write(path, events: 1_000_000) # ~11 MB: several steps of 4 MB per pass
    calls = []
    progress = Object.new
    progress.define_singleton_method(:phase) { |label, total| calls << [label, total] }
    progress.define_singleton_method(:advance_to) { |bytes| calls.last << bytes }
    GVLScope::Model::Scan.open(path, progress: progress)
    assert_equal ["reading #{path}", "analysing #{path}"], calls.map(&:first)
    size = File.size(path)
    calls.each do |label, total, *advances|
      assert_equal size, total, label
      assert_operator advances.size, :>=, 2, label
      assert_equal advances.sort, advances, "#{label}: forward only"
      assert_operator advances.last, :<=, size, label
      assert_operator advances.last, :>=, size * 0.9, "#{label}: the whole file at the end"
    end
  end

  private

  # [peak bytes of the engine, Ruby objects allocated] for a report and an export of +path+.
  def measure(path)
    objects = GC.stat(:total_allocated_objects)
    file = GVLScope::Model::Scan.read(path)
    scan = GVLScope::Model::Scan.new(file, spill: true, exact_medians: 10_000).run
    report = GVLScope::Analysis::Report.new(scan)
    GVLScope::Formats::ReportText.new(report).to_s
    GVLScope::Formats::ReportJSON.new(report).to_s
    File.open(File::NULL, "wb") { |io| GVLScope::Formats::ChromeJSON.new(scan).write(io) }
    [scan.peak_bytes, GC.stat(:total_allocated_objects) - objects]
  end

  # Report#detail from the reference's intervals.
  def window(timeline, start_ns, end_ns, limit)
    found = []
    timeline.each_thread do |thread|
      found.concat(thread.intervals.select { |i| (i.end_ns > start_ns || i.start_ns >= start_ns) && i.start_ns < end_ns })
    end
    found.each_with_index.sort_by { |interval, index| [interval.start_ns, index] }.map(&:first).first(limit).map(&:to_a)
  end

  def assert_same_answers(path) = assert_engine_matches_reference(path)
end
