# frozen_string_literal: true

require "test_helper"
require "json"
require "tmpdir"
require "logger"
require "minitest/mock"

# The flight recorder keeps the last seconds of events in memory and dumps them as a normal .gvl
# file: readable by TraceFile and the engine (Model::Scan), bounded in time, rate-limited, fork-aware.
class FlightRecorderTest < Minitest::Test
  include GVLScopeTestHelper

  QUIET = Logger.new(nil)

  def setup
    @dir = Dir.mktmpdir("gvlscope-flight")
  end

  def teardown
    GVLScope::FlightRecorder.stop if GVLScope::FlightRecorder.running?
    FileUtils.rm_rf(@dir)
  end

  def burn(name, seconds) = GVLWorkloads.cpu_thread(name, seconds)

  def test_a_dump_is_a_readable_trace_of_the_threads_that_ran
    log = StringIO.new
    GVLScope::FlightRecorder.start(seconds: 5, dir: @dir, signal: nil, logger: Logger.new(log))
    2.times.map { |n| burn("dump-cpu#{n}", 0.3) }.each(&:join)
    dump = GVLScope::FlightRecorder.dump("test")

    assert_equal @dir, File.dirname(dump.path)
    assert_match(/gvlscope-flight-#{Process.pid}-.*-test\.gvl\z/, dump.path)
    trace = GVLScope::Model::TraceFile.read(dump.path)
    refute trace.truncated?
    # The count announced is the events `gvlscope report` reads (issue 28: 2,159 said, 1,855 read:
    # the stack records were counted as events); records adds those.
    assert_equal [trace.size, trace.records], [dump.events, dump.records]
    assert_operator dump.records, :>, dump.events, "two threads preempting each other leave release-site records"
    assert_includes log.string, "(#{trace.size} events)"
    assert_operator trace.size, :>, 10
    timeline = GVLScope::Model.timeline(dump.path)
    assert_consistent(timeline)
    labels = timeline.threads.values.map(&:label)
    assert_includes labels, "dump-cpu0"
    assert_includes labels, "dump-cpu1"
    # Two CPU threads preempt each other every timeslice: both wanted the GVL for a while.
    # (Names no other test uses: threads of earlier tests in this process, such as metrics_test's
    # "cpu0" and "cpu1", can still be in the thread table.)
    cpu = timeline.threads.values.select { |t| %w[dump-cpu0 dump-cpu1].include?(t.label) }
    assert_equal 2, cpu.size
    cpu.each { |t| assert(t.intervals.any? { |i| i.state == :wait }, "#{t.label} never waited") }
    # And `gvlscope report` reads it like any trace.
    out, err, status = gvlscope("report", "--json", dump.path)
    assert status.success?, err
    assert_equal labels.sort, JSON.parse(out)["threads"].map { |t| t["name"] }.sort
  end

  def test_a_dump_holds_only_the_window_before_it
    GVLScope::FlightRecorder.start(seconds: 0.5, dir: @dir, signal: nil, logger: QUIET)
    burn("old", 0.2).join
    sleep 1.0
    burn("new", 0.2).join
    dump = GVLScope::FlightRecorder.dump
    trace = GVLScope::Model::TraceFile.read(dump.path)

    assert_operator dump.duration, :<=, 0.51
    assert_operator trace.times.first, :>=, 0
    assert_operator trace.times.last, :<=, trace.end_ns
    serials = trace.threads.uniq
    old = trace.thread_info.values.find { |info| info.name == "old" }
    new = trace.thread_info.values.find { |info| info.name == "new" }
    refute_includes serials, old.serial, "events of a thread that ran before the window"
    assert_includes serials, new.serial
  end

  def test_dumps_are_rate_limited
    GVLScope::FlightRecorder.start(seconds: 1, dir: @dir, signal: nil, min_interval: 60, logger: QUIET)
    assert GVLScope::FlightRecorder.dump("first")
    assert_nil GVLScope::FlightRecorder.dump("second")
    assert_nil GVLScope::FlightRecorder.dump_later("third")
    assert_equal 2, GVLScope::FlightRecorder.suppressed
    assert_equal 1, Dir[File.join(@dir, "*.gvl")].size
  end

  # Two dumps in the same millisecond for the same reason, and a symlink where the next dump
  # would go: each dump is a new file, nothing is overwritten nor written through the link.
  def test_a_dump_never_overwrites_a_file
    GVLScope::FlightRecorder.start(seconds: 1, dir: @dir, signal: nil, min_interval: 0, logger: QUIET)
    target = File.join(@dir, "target")
    File.write(target, "kept")
    File.symlink(target, File.join(@dir, "gvlscope-flight-#{Process.pid}-19700101T000000.000-same.gvl"))
    paths = Time.stub(:now, Time.at(0)) { 3.times.map { GVLScope::FlightRecorder.dump("same").path } }
    assert_equal 3, paths.uniq.size, paths.inspect
    paths.each { |path| refute GVLScope::Model::TraceFile.read(path).truncated? }
    assert_equal "kept", File.read(target)
  end

  # A directory keeps the newest `keep:` dumps (and at most `keep_bytes:`): a recorder that dumps
  # for every slow request cannot fill the disk. Other files there are not touched.
  def test_old_dumps_beyond_the_limits_are_deleted
    File.write(File.join(@dir, "notes.gvl"), "mine")
    File.write(File.join(@dir, "gvlscope-flight-notes.txt"), "mine too")
    GVLScope::FlightRecorder.start(seconds: 1, dir: @dir, signal: nil, min_interval: 0, keep: 3, logger: QUIET)
    paths = 5.times.map { |n| GVLScope::FlightRecorder.dump("dump #{n}").path }
    assert_equal paths.last(3).sort, Dir[File.join(@dir, "gvlscope-flight-*.gvl")].sort
    assert_equal "mine", File.read(File.join(@dir, "notes.gvl"))
    assert_equal "mine too", File.read(File.join(@dir, "gvlscope-flight-notes.txt"))
    GVLScope::FlightRecorder.stop

    GVLScope::FlightRecorder.start(seconds: 1, dir: @dir, signal: nil, min_interval: 0, keep_bytes: 1, logger: QUIET)
    newest = 2.times.map { GVLScope::FlightRecorder.dump("tiny budget").path }.last
    assert_equal [newest], Dir[File.join(@dir, "gvlscope-flight-*.gvl")], "the newest dump is always kept"
  end

  # A dump that cannot be written (a full disk; here the file size limit, which fails the same
  # write(2)) raises nothing into the application, leaves no file to count toward keep:, is
  # counted and told. Runs in a child: the limit is process-wide.
  def test_a_dump_that_cannot_be_written_raises_nothing_and_leaves_no_file
    out, err, status = run_ruby(<<~RUBY, @dir, timeout: 60)
      require "gvlscope"
      require "logger"
      require "stringio"
      dir = ARGV[0]
      log = StringIO.new
      GVLScope::FlightRecorder.start(seconds: 5, dir: dir, signal: nil, min_interval: 0, logger: Logger.new(log))
      Thread.new { 200_000.times { } }.join
      Signal.trap("XFSZ", "IGNORE") # past the limit write(2) fails with EFBIG instead of killing
      Process.setrlimit(:FSIZE, 100)
      results = [GVLScope::FlightRecorder.dump("full"), GVLScope::FlightRecorder.dump_later("full later").value]
      puts results.inspect, GVLScope::FlightRecorder.failed, Dir[File.join(dir, "*")].size, log.string
    RUBY
    assert status.success?, err
    results, failed, files, *log = out.lines
    assert_equal ["[nil, nil]", "2", "0"], [results, failed, files].map(&:chomp)
    assert_equal 2, log.grep(/flight recorder dump failed .*File too large/).size, log.join
  end

  # exec replaced the image while a dump_later thread was writing: the dump was left cut short.
  # exec waits for it (the dump is stubbed to be slow, half written when exec is called).
  def test_exec_waits_for_a_dump_being_written
    out, err, status = run_ruby(<<~'RUBY', @dir, timeout: 60)
      require "gvlscope"
      require "logger"
      GVLScope::FlightRecorder.start(seconds: 5, dir: ARGV[0], signal: nil, logger: Logger.new(nil))
      half_written = Queue.new
      GVLScope::Native.define_singleton_method(:flight_dump) do |path|
        File.write(path, "half ")
        half_written << true
        sleep 0.5
        File.write(path, "whole", mode: "a")
        [0, 0, 0, 0]
      end
      GVLScope::FlightRecorder.dump_later("slow")
      half_written.pop
      exec(RbConfig.ruby, "-e", "puts Dir[File.join(ARGV[0], '*.gvl')].map { |path| File.read(path) }", ARGV[0])
    RUBY
    assert status.success?, err
    assert_equal "half whole\n", out
  end

  def test_a_file_trace_and_the_recorder_exclude_each_other
    GVLScope::FlightRecorder.start(dir: @dir, signal: nil)
    refute GVLScope.tracing?
    error = assert_raises(GVLScope::Error) { GVLScope.start(File.join(@dir, "t.gvl")) }
    assert_match(/flight recorder is running/, error.message)
    assert_raises(GVLScope::Error) { GVLScope.stop }
    GVLScope::FlightRecorder.stop
    GVLScope.trace(File.join(@dir, "t.gvl")) do
      assert_raises(GVLScope::Error) { GVLScope::FlightRecorder.start(dir: @dir, signal: nil) }
    end
  end

  def test_bad_options_raise_one_line_errors_at_start
    file = File.join(@dir, "a-file")
    File.write(file, "")
    {
      { dir: File.join(file, "sub") } => /dump directory .* is not writable/,
      { seconds: 0 } => /seconds must be/,
      { seconds: 600 } => /seconds must be/,
      { buffer_bytes: 1000 } => /buffer_bytes/,
      { signal: "NOPE" } => /signal "NOPE" cannot be trapped/,
      { keep: 0 } => /keep must be an Integer >= 1 or nil, got 0/,
      { keep: "5" } => /keep must be/,
      { keep_bytes: -1 } => /keep_bytes must be an Integer >= 1 or nil, got -1/,
    }.each do |options, message|
      error = assert_raises(GVLScope::Error) { GVLScope::FlightRecorder.start(dir: @dir, **options) }
      assert_match message, error.message
      refute_includes error.message, "\n"
      refute GVLScope::FlightRecorder.running?
    end
    error = assert_raises(GVLScope::Error) { GVLScope::FlightRecorder.start(dir: @dir, window: 3) }
    assert_match(/unknown option :window/, error.message)
  end

  # Runs in a child: traps are process-wide.
  def test_the_signal_dumps_once_and_an_application_handler_is_kept
    out, err, status = run_ruby(<<~RUBY, @dir, timeout: 60)
      require "gvlscope"
      dir = ARGV[0]
      GVLScope::FlightRecorder.start(seconds: 2, dir: dir, signal: "USR2")
      Process.kill(:USR2, Process.pid)
      deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 10
      sleep 0.05 until Dir[File.join(dir, "*.gvl")].any? || Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
      sleep 0.2
      puts Dir[File.join(dir, "*.gvl")].size
      GVLScope::FlightRecorder.stop
      puts Signal.trap(:USR2, "DEFAULT")

      mine = proc { puts "app handler" }
      Signal.trap(:USR1, mine)
      GVLScope::FlightRecorder.start(dir: dir, signal: "USR1")
      puts Signal.trap(:USR1, "DEFAULT") == mine
    RUBY
    assert status.success?, err
    count, restored, kept = out.lines.map(&:chomp)
    assert_equal "1", count
    assert_equal "DEFAULT", restored
    assert_equal "true", kept
    assert_match(/SIGUSR1 already has a handler/, err)
  end

  def test_a_forked_child_records_and_dumps_its_own_history
    out, err, status = run_ruby(<<~RUBY, @dir, timeout: 60)
      require "gvlscope"
      dir = ARGV[0]
      GVLScope::FlightRecorder.start(seconds: 5, dir: dir, signal: nil)
      pid = fork do
        Thread.new { Thread.current.name = "child-only"; 200_000.times { } }.join
        print GVLScope::FlightRecorder.dump("child").path
      end
      Process.wait(pid)
      exit 1 unless $?.success?
    RUBY
    assert status.success?, err
    trace = GVLScope::Model::TraceFile.read(out)
    refute_match(/gvlscope-flight-#{Process.pid}/, out)
    assert(trace.thread_info.values.any? { |info| info.name == "child-only" })
    assert_operator trace.size, :>, 0
  end
end
