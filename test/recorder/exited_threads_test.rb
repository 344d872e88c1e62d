# frozen_string_literal: true

require "test_helper"
require "tmpdir"

# A trace, the flight recorder or metrics keep a slot per thread, and the registry used to mark
# every slot's Thread object until stop: an exited thread's Thread (on 3.4 M:N also its stack's two
# memory mappings) stayed for as long as the trace ran, which is why 100,000 M:N threads traced
# died at ~21,700 threads on the default vm.max_map_count while untraced reached ~32,700 (issue
# 16). Now the slot lets go of its Thread shortly after EXITED, once its name and creation site
# are read. Each scenario runs in a child Ruby (M:N on 3.4, where stacks of collected threads are
# reused): 3 rounds of 2,000 threads that start, name themselves and exit, GC between rounds.
class ExitedThreadsTest < Minitest::Test
  include GVLScopeTestHelper

  ROUNDS = 3
  THREADS = 2_000

  # Prints the Thread objects alive, the slots still marking theirs and the memory mappings the
  # last round added (/proc/self/maps lines).
  CHILD = <<~RUBY
    require "gvlscope"
    mode, path, dir = ARGV
    case mode
    when "trace" then GVLScope.start(path, stacks: false)
    when "flight" then GVLScope::FlightRecorder.start(dir: dir, signal: nil, stacks: false)
    when "metrics" then GVLScope::Metrics.enable
    end

    # CRuby scans the main thread's stack conservatively: a stale pointer there to a round's
    # Array would keep the whole round, traced or not, so the Array is emptied; and a worker's
    # block sees only the queue and its name, so a stale pointer to one Thread keeps that one.
    def worker(queue, name) = Thread.new { queue.pop; Thread.current.name = name }

    def round(number)
      queue = Queue.new
      threads = Array.new(#{THREADS}) { |i| worker(queue, "round-\#{number}-\#{i}") }
      #{THREADS}.times { queue << 1 }
      threads.each(&:join).clear
      nil
    end

    maps = -> { File.foreach("/proc/self/maps").count }
    before_last_round = nil
    #{ROUNDS}.times do |number|
      before_last_round = maps.call if number == #{ROUNDS} - 1
      round(number)
      2.times { GC.start(full_mark: true, immediate_sweep: true) }
    end
    # The release runs as a postponed job soon after each EXITED (at the latest after the next GC
    # or the next event of another thread): a few more rounds of GC and sleep for the last ones.
    10.times do
      break if ObjectSpace.each_object(Thread).count <= 5

      sleep 0.01
      GC.start(full_mark: true, immediate_sweep: true)
    end
    puts ObjectSpace.each_object(Thread).count, GVLScope::Native.debug_registry_threads, maps.call - before_last_round
    case mode
    when "trace" then GVLScope.stop
    when "flight" then puts GVLScope::FlightRecorder.dump("test").path
    when "metrics" then puts GVLScope::Metrics.snapshot.threads.count { |row| row.name.start_with?("round-") }
    end
  RUBY

  def mn? = Gem::Version.new(RUBY_VERSION) >= Gem::Version.new("3.4")

  # -> [Thread objects alive, slots marking a Thread, mappings the last round added, what the mode printed after]
  def run_child(mode, dir)
    env = mn? ? { "RUBY_MN_THREADS" => "1" } : {}
    out, err, status = run_ruby(CHILD, mode, File.join(dir, "t.gvl"), dir, env: env, timeout: 180)
    assert status.success?, err
    threads, marked, maps, extra = out.lines.map(&:chomp)
    [threads.to_i, marked.to_i, maps.to_i, extra]
  end

  # Of the 6,001 threads only the main one is alive: its Thread, and at most a few dead ones that
  # the conservative GC still sees on the main thread's stack (leak_test.rb allows the same).
  def assert_exited_threads_collected(mode, threads, marked)
    assert_equal 1, marked, "#{mode}: registry slots still marking their Thread (only the main thread's should)"
    assert_operator threads, :<=, 5, "#{mode}: Thread objects alive after #{ROUNDS * THREADS} threads exited"
  end

  def assert_names_and_sites(path)
    timeline = GVLScope::Model.timeline(path)
    rounds = timeline.file.thread_info.values.select { |info| info.name&.start_with?("round-") }
    assert_equal ROUNDS * THREADS, rounds.size, "exited threads named in the trace"
    assert_includes rounds.map(&:name), "round-#{ROUNDS - 1}-#{THREADS - 1}"
    assert rounds.all? { |info| info.created_at&.match?(/\A-e:\d+\z/) }, "creation sites: #{rounds.map(&:created_at).tally.first(3)}"
    labels = timeline.threads.values.map(&:label)
    assert_includes labels, "round-0-0", "the report's thread labels"
  end

  def test_a_trace_lets_go_of_exited_threads_and_still_names_them
    Dir.mktmpdir("gvlscope-exited") do |dir|
      threads, marked, traced_maps, = run_child("trace", dir)
      assert_exited_threads_collected("trace", threads, marked)
      assert_names_and_sites(File.join(dir, "t.gvl"))
      next unless mn?

      # 3.4 takes an M:N thread's stack (2 mappings: the stack and its guard page) from a pool and
      # gives it back when the Thread object is freed: with the first two rounds collected, the
      # third round's 2,000 threads reuse their stacks (untraced, it maps 0 to ~100 more). A trace
      # that kept the Thread objects made it map 4,000 (every thread a new stack). Allowed: the
      # stacks of 500 threads more than untraced.
      _, _, untraced_maps, = run_child("none", dir)
      assert_operator traced_maps, :<=, untraced_maps + 1_000,
                      "mappings the last round added traced (#{traced_maps}) against untraced (#{untraced_maps})"
    end
  end

  def test_the_flight_recorder_lets_go_of_exited_threads_and_its_dump_names_them
    Dir.mktmpdir("gvlscope-exited") do |dir|
      threads, marked, _maps, dump = run_child("flight", dir)
      assert_exited_threads_collected("flight", threads, marked)
      assert_names_and_sites(dump)
    end
  end

  def test_metrics_let_go_of_exited_threads_before_any_snapshot
    Dir.mktmpdir("gvlscope-exited") do |dir|
      threads, marked, _maps, named = run_child("metrics", dir)
      assert_exited_threads_collected("metrics", threads, marked)
      # Exited since the last snapshot (none): each is a row once more, under the name it had.
      assert_equal ROUNDS * THREADS, named.to_i
    end
  end
end
