# frozen_string_literal: true

require_relative "../test_helper"
require "open3"
require "gvlscope"
require "gvlscope/live/answer"
require_relative "../../lab/tiny_scheduler"

# GVLScope::Live::Answer: the live socket's snapshot answer, written without an object per thread,
# is the text the Snapshot builder gives for the same metrics, byte for byte.
class LiveAnswerTest < Minitest::Test
  Snapshot = GVLScope::Live::Snapshot
  # More than Snapshot::CODE_LOCATIONS_MAX, so the answer picks whose code it looks up, and more
  # than Answer::ROWS_PER_TURN, so it gives the GVL back between rows.
  THREADS = 600

  def setup
    @enabled_here = GVLScope::Metrics.enable
    @queue = Queue.new
    # Named, namesakes, unnamed (labelled with where they were created) and a name a terminal
    # would obey (escaped) with a quote and a backslash (JSON-escaped).
    names = ->(i) { [nil, "pool #{i}", "worker", "evil\e]0;x\a\u202e\"\\ #{i}"][i % 4] }
    @threads = Array.new(THREADS) do |i|
      Thread.new do
        Thread.current.name = names.(i)
        @queue.pop
      end
    end
    # One that exits before the snapshot: its row is labelled with the name it had.
    Thread.new { Thread.current.name = "gone" }.join
    Thread.pass until @threads.all? { |thread| thread.status == "sleep" }
  end

  def teardown
    @threads.each { @queue << nil }
    @threads.each(&:join)
    GVLScope::Metrics.disable if @enabled_here
  end

  # What the Snapshot builder answers for the packed metrics +native+ (as LiveServer#snapshot).
  def built(native, stacks:)
    snapshot = Snapshot.from_metrics(GVLScope::Metrics::Snapshot.from_native(native), pid: 42, trace_path: "t.gvl",
                                                                                        timeslice_ns: 50_000_000, stacks: stacks,
                                                                                        loops: Snapshot.loop_rows(GVLScope::Native.loop_rows))
    "#{JSON.generate({ 'snapshot' => snapshot.to_h })}\n"
  end

  # Answer#json for +native+ (Native.metrics_snapshot answers it once).
  def answered(answer, native, stacks:)
    native_module = GVLScope::Native.singleton_class
    native_module.alias_method(:real_metrics_snapshot, :metrics_snapshot)
    native_module.define_method(:metrics_snapshot) { native }
    answer.json(pid: 42, trace_path: "t.gvl", timeslice_ns: 50_000_000, stacks: stacks, breakdown: [])
  ensure
    native_module.alias_method(:metrics_snapshot, :real_metrics_snapshot)
    native_module.remove_method(:real_metrics_snapshot)
  end

  def test_the_answer_is_the_builders_text
    answer = GVLScope::Live::Answer.new
    native = GVLScope::Native.metrics_snapshot
    expected = built(native, stacks: true)
    assert_equal expected, answered(answer, native, stacks: true)
    assert_equal built(native, stacks: false), answered(answer, native, stacks: false)

    rows = JSON.parse(expected)["snapshot"]["threads"]
    labels = rows.map { |row| row["label"] }
    assert_operator rows.size, :>, THREADS
    assert_includes labels, "gone"
    assert(labels.any? { |label| label.match?(/\Aworker #\d+\z/) }, "namesakes told apart")
    unnamed = @threads.first # names.(0): nil
    assert(labels.any? { |label| label.start_with?("thread ") && label.include?("live_answer_test.rb") },
           "an unnamed thread's creation site: #{unnamed.inspect} gives #{GVLScope::Native.thread_created_at(unnamed).inspect} " \
           "(cwd #{Dir.pwd}); labels #{labels.grep(/\Athread /).first(3).inspect}")
    assert(labels.any? { |label| label.start_with?("evil\\e]0;x\\a\\u202E\"\\") }, "a terminal's controls escaped")
    # Code is looked up for the busiest CODE_LOCATIONS_MAX threads at most. Which those are, and
    # whether each has a Ruby frame to show, depends on what else this process ran (the suite's
    # earlier tests leave threads of their own, busier than these: in a full run on 3.4.5 none of
    # the 64 chosen had a frame to show), so that any has code is asserted where nothing else ran
    # (test/top, a child process), and here only the cap.
    assert_operator rows.count { |row| row["code"] }, :<=, Snapshot::CODE_LOCATIONS_MAX
  end

  # A thread whose event loop gave turns has them in its row ("loop"), written in C as the builder
  # writes them; the other threads have none.
  def test_an_event_loops_turns_are_in_its_threads_row
    GVLScope::EventLoops.track
    looped, release = Queue.new, Queue.new
    thread = Thread.new do
      Thread.current.name = "loop"
      Fiber.set_scheduler(TinyScheduler.new)
      # Each fiber has two turns: until its sleep gives the loop back, and after it.
      3.times { Fiber.schedule { sleep 0.001 } }
      Fiber.set_scheduler(nil) # runs the loop to its end
      looped << true
      release.pop
    end
    looped.pop
    answer = GVLScope::Live::Answer.new
    native = GVLScope::Native.metrics_snapshot
    text = answered(answer, native, stacks: false)
    assert_equal built(native, stacks: false), text
    rows = JSON.parse(text)["snapshot"]["threads"].select { |row| row["loop"] }
    assert_equal ["loop"], rows.map { |row| row["label"] }
    assert_equal 6, rows.first["loop"]["turns"]
    assert_equal 6, rows.first["loop"]["turn_histogram"].sum
    assert_operator rows.first["loop"]["longest_turn_ns"], :<=, rows.first["loop"]["busy_ns"]
  ensure
    release&.push(true)
    thread&.join
    GVLScope::EventLoops.track(false)
    GVLScope::Native.loop_requests = false
  end

  # A label is kept from one answer to the next only while the thread's name stays.
  def test_a_renamed_thread_is_relabelled
    answer = GVLScope::Live::Answer.new
    answered(answer, GVLScope::Native.metrics_snapshot, stacks: false)
    @threads[1].name = "renamed"
    @threads[2].name = nil
    native = GVLScope::Native.metrics_snapshot
    text = answered(answer, native, stacks: false)
    assert_equal built(native, stacks: false), text
    assert_includes JSON.parse(text)["snapshot"]["threads"].map { |row| row["label"] }, "renamed"
  end

  # The point of the Answer: no Ruby object per thread once the labels are known. Counted in a Ruby
  # of its own: GC.stat counts every thread's objects, and the suite's other tests leave threads
  # that make theirs meanwhile (in a full run this process counted ~2,470 for the same answer).
  ALLOCATIONS = <<~'RUBY'
    require "gvlscope"
    require "gvlscope/live/answer"
    GVLScope::Metrics.enable
    queue = Queue.new
    names = ->(i) { [nil, "pool #{i}", "worker", "evil\e]0;x\a\u202e\"\\ #{i}"][i % 4] }
    threads = Array.new(Integer(ARGV[0])) { |i| Thread.new { Thread.current.name = names.(i); queue.pop } }
    Thread.pass until threads.all? { |thread| thread.status == "sleep" }
    answer = GVLScope::Live::Answer.new
    answer.json(pid: 42, trace_path: nil, timeslice_ns: 50_000_000, stacks: false, breakdown: [])
    before = GC.stat(:total_allocated_objects)
    answer.json(pid: 42, trace_path: nil, timeslice_ns: 50_000_000, stacks: false, breakdown: [])
    print GC.stat(:total_allocated_objects) - before
  RUBY

  def test_an_answer_makes_fewer_objects_than_threads
    out, err, status = Open3.capture3(RbConfig.ruby, "-I", File.join(GVLScopeTestHelper::ROOT, "lib"), "-e", ALLOCATIONS, THREADS.to_s)
    assert status.success?, err
    # (~200 whatever the threads; the Snapshot builder makes ~9 a thread)
    assert_operator Integer(out), :<, THREADS, "objects made by one answer for #{THREADS} threads"
  end

  def test_the_snapshot_reads_back
    text = GVLScope::Live::Answer.new.json(pid: 42, trace_path: nil, timeslice_ns: 50_000_000, stacks: true, breakdown: [])
    snapshot = Snapshot.from_h(JSON.parse(text)["snapshot"])
    assert_operator snapshot.threads.size, :>, THREADS
    assert_equal "(exited threads)", snapshot.exited_threads.label
  end
end
