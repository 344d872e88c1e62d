# frozen_string_literal: true

require "test_helper"
require "gvlscope/model"
require "tmpdir"

# Scripted thread interactions, traced, and the exact state sequences they must produce.
class TraceTest < Minitest::Test
  include GVLScopeTestHelper

  def setup
    @dir = Dir.mktmpdir("gvlscope-trace")
    @path = File.join(@dir, "t.gvl")
  end

  def teardown
    GVLScope.stop if GVLScope.tracing?
    FileUtils.rm_rf(@dir)
  end

  def timeline_of(&block)
    summary = GVLScope.trace(@path, &block)
    assert_equal 0, summary.dropped
    GVLScope::Model.timeline(@path)
  end

  def clock = Process.clock_gettime(Process::CLOCK_MONOTONIC)

  # Polls +condition+ every millisecond for up to +seconds+; fails if it never holds.
  def wait_until(seconds)
    deadline = clock + seconds
    sleep 0.001 until (held = yield) || clock > deadline
    assert held, "not within #{seconds} s"
  end

  # [state, reason] per interval, GC intervals merged back into running.
  def states(timeline, name)
    thread = timeline.threads.values.find { |t| t.label == name } or flunk "no thread #{name}: #{timeline.threads.values.map(&:label)}"
    thread.intervals.reject { |i| i.state == :gc }.map { |i| [i.state, i.reason] }.chunk_while { |a, b| a == b && a[0] == :run }.map(&:first)
  end

  def test_thread_blocked_on_a_pipe_then_woken
    reader, writer = IO.pipe
    started_at = blocked_at = written_at = joined_at = nil
    timeline = timeline_of do
      started_at = clock
      thread = Thread.new { reader.read(1) }
      thread.name = "reader" # set after start: the name must still be in the trace
      # Blocked in the read first: on a loaded machine the new thread may not have run at all yet.
      # Its status turns "sleep" as it lets go of the GVL for the read (one blocking region for
      # read and poll), so polling here never makes it wait.
      wait_until(10) { thread.status == "sleep" }
      blocked_at = clock
      sleep 0.05
      written_at = clock
      writer.write("x")
      thread.join
      joined_at = clock
    end
    # The read's release site is recorded only when another thread waits for the GVL at that
    # moment (stacks.h): the polling main thread may be. With the site the release is IO#read's
    # (:io); without, the release's cause is unknown and GVL events alone say the idle was a
    # blocking call that returned on its own native thread.
    sequence = states(timeline, "reader")
    released = sequence[2..3] == [[:run, :io], [:idle, :io]] ? [[:run, :io], [:idle, :io]] : [[:run, :unknown], [:idle, :io_sleep]]
    assert_equal [[:started, nil], [:wait, nil], *released, [:wait, nil], [:run, :exit], [:exited, nil]], sequence
    blocked = timeline.threads.values.find { |t| t.label == "reader" }.intervals.find { |i| i.state == :idle }
    # Idle at least from when it was seen blocked until the write, at most the whole scenario (1 %
    # for gvlscope's TSC clock against CLOCK_MONOTONIC); a loaded machine stretches both alike.
    assert_operator blocked.duration_ns, :>=, 0.99 * (written_at - blocked_at) * 1e9
    assert_operator blocked.duration_ns, :<=, 1.01 * (joined_at - started_at) * 1e9
  ensure
    [reader, writer].each(&:close)
  end

  def test_sleeping_thread
    timeline = timeline_of do
      Thread.new { Thread.current.name = "sleeper"; sleep 0.1 }.join
    end
    sequence = states(timeline, "sleeper")
    assert_equal [:started, :wait, :run, :idle, :wait, :run, :exited], sequence.map(&:first)
    waiting = timeline.threads.values.find { |t| t.label == "sleeper" }.intervals.find { |i| i.state == :idle }
    assert_equal :io_sleep, waiting.reason
    assert_operator waiting.duration_ns, :>=, 95_000_000
  end

  def test_mutex_contention_marks_the_wait_as_woken_by_another_thread
    mutex = Mutex.new
    locked = Queue.new
    timeline = timeline_of do
      holder = Thread.new do
        Thread.current.name = "holder"
        mutex.synchronize { locked << true; sleep 0.05 }
      end
      locked.pop
      waiter = Thread.new { Thread.current.name = "waiter"; mutex.synchronize { :got_it } }
      assert_equal :got_it, waiter.value
      holder.join
    end
    waits = timeline.threads.values.find { |t| t.label == "waiter" }.intervals.select { |i| i.state == :idle }
    lock_wait = waits.find { |i| i.reason == :lock }
    refute_nil lock_wait, "waiter's waits: #{waits.map(&:reason)}"
    assert_operator lock_wait.duration_ns, :>, 20_000_000
  end

  # Two CPU-bound threads share the GVL by timeslices: each running slice ends in a preemption
  # and lasts about one timeslice (100 ms; bounds are loose for a noisy 2-core machine).
  def test_two_cpu_threads_alternate_by_timeslice
    timeline = timeline_of do
      # Each thread counts the slices it gets (the turn passes when the other one ran) and both
      # stop once each has had three: a count of slices, not a time a loaded machine can eat.
      owner = nil
      turns = [0, 0]
      give_up = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 20
      2.times.map do |n|
        Thread.new do
          Thread.current.name = "cpu#{n}"
          until turns.all? { |count| count >= 3 } || Process.clock_gettime(Process::CLOCK_MONOTONIC) > give_up
            next if owner == n

            owner = n
            turns[n] += 1
          end
        end
      end.each(&:join)
    end
    %w[cpu0 cpu1].each do |name|
      thread = timeline.threads.values.find { |t| t.label == name }
      preempted = thread.intervals.select { |i| i.state == :run && i.reason == :preempted }
      assert_operator preempted.size, :>=, 2, "#{name}: #{thread.intervals.map { |i| [i.state, i.reason, i.duration_ns / 1_000_000] }}"
      # ~100 ms each; a loaded VM taking the CPU away now and then stretches a slice in wall time.
      preempted.each { |slice| assert_includes 30_000_000..5_000_000_000, slice.duration_ns }
      refute thread.intervals.any? { |i| i.state == :idle && i.reason != :unknown }, "a CPU thread never blocks"
    end
  end

  def test_gc_inside_a_trace
    timeline = timeline_of { GC.start }
    main = timeline.threads.values.find { |t| t.info.main }
    gc = main.intervals.select { |i| i.state == :gc }
    refute_empty gc
    assert gc.all? { |i| i.duration_ns.positive? }
  end

  def test_threads_that_existed_before_start_are_named_and_inferred
    queue = Queue.new
    thread = Thread.new { Thread.current.name = "early"; queue.pop }
    sleep 0.02
    timeline = timeline_of { queue << :go; thread.join }
    early = timeline.threads.values.find { |t| t.label == "early" }
    assert_equal %i[idle wait run exited], early.intervals.map(&:state).uniq
    assert_equal :unknown, early.intervals.first.reason # its blocking call began before the trace
    assert_equal 0, early.intervals.first.start_ns
  end

  def test_no_two_threads_of_one_ractor_run_at_once_and_resumed_follows_ready
    timeline = timeline_of do
      4.times.map { |n| Thread.new { 3.times { sleep 0.001; 20_000.times.sum } } }.each(&:join)
    end
    assert_consistent(timeline)
  end

  def test_api_errors_leave_the_process_as_it_was
    assert_raises(GVLScope::Error) { GVLScope.stop }
    assert_raises(Errno::ENOENT) { GVLScope.start(File.join(@dir, "missing", "t.gvl")) }
    refute GVLScope.tracing?
    assert_raises(ArgumentError) { GVLScope.start(@path, buffer_bytes: 10) }
    assert_raises(ArgumentError) { GVLScope.start(@path, colour: :red) }
    refute GVLScope.tracing?
    GVLScope.start(@path)
    error = assert_raises(GVLScope::Error) { GVLScope.start(@path) }
    assert_match(/already running/, error.message)
    summary = GVLScope.stop
    assert_equal @path, summary.path
    refute GVLScope.tracing?
  end

  # A trace is a new file, never an existing one, nor one a symlink points to (O_EXCL|O_NOFOLLOW).
  def test_a_trace_never_overwrites_a_file
    File.write(@path, "precious")
    error = assert_raises(Errno::EEXIST) { GVLScope.start(@path) }
    assert_includes error.message, @path
    refute GVLScope.tracing?
    assert_equal "precious", File.read(@path)
    target = File.join(@dir, "target")
    File.write(target, "kept")
    File.symlink(target, File.join(@dir, "link.gvl"))
    assert_raises(Errno::EEXIST) { GVLScope.start(File.join(@dir, "link.gvl")) }
    assert_equal "kept", File.read(target)
    File.symlink(File.join(@dir, "nowhere"), File.join(@dir, "dangling.gvl"))
    assert_raises(Errno::EEXIST) { GVLScope.start(File.join(@dir, "dangling.gvl")) }
    refute File.exist?(File.join(@dir, "nowhere"))
    refute GVLScope.tracing?
  end

  def test_reader_errors
    File.binwrite(@path, "")
    assert_raises_message(/empty file/) { GVLScope::Model::TraceFile.read(@path) }
    File.binwrite(@path, "#!/bin/sh\necho not a trace\n" * 3)
    assert_raises_message(/not a gvlscope trace/) { GVLScope::Model::TraceFile.read(@path) }
    File.binwrite(@path, ["GVLSCOPE", 99, 40, 0, 0, 1, 100_000].pack(GVLScope::Model::TraceFile::HEADER))
    assert_raises_message(/version 99 is newer/) { GVLScope::Model::TraceFile.read(@path) }
  end

  def test_a_truncated_file_reads_up_to_its_last_whole_chunk
    timeline_of { 3.times.map { Thread.new { sleep 0.001 } }.each(&:join) }
    whole = GVLScope::Model::TraceFile.read(@path)
    refute whole.truncated?
    data = File.binread(@path)
    File.binwrite(@path, data[0, data.bytesize - 10]) # cut inside the end record
    cut = GVLScope::Model::TraceFile.read(@path)
    assert cut.truncated?
    assert_equal whole.size, cut.size
    assert_match(/ends inside a chunk/, cut.warnings.first)
  end

  def test_thread_records_carry_the_main_thread_and_exits
    timeline = timeline_of { Thread.new { nil }.join }
    infos = timeline.file.thread_info.values
    assert_equal 1, infos.count(&:main)
    assert infos.any? { |info| info.exited && !info.main }
    assert infos.all? { |info| info.ractor_id == 1 }
  end

  private

  def assert_raises_message(pattern, &block)
    error = assert_raises(GVLScope::FormatError, &block)
    assert_match pattern, error.message
  end
end
