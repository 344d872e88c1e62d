# frozen_string_literal: true

require_relative "../test_helper"
require "gvlscope/live"

# GVLScope::Live::Snapshot: plain data that round-trips through JSON and subtracts into intervals;
# the live rules judge an interval's numbers.
class LiveSnapshotTest < Minitest::Test
  MS = 1_000_000
  Snapshot = GVLScope::Live::Snapshot

  def row(serial, label, state: :run, run: 0, wait: 0, idle: 0, gc: 0, waits: 0, blocking: 0, preempted: 0, exited: false,
          overlap: 0, loop: nil)
    Snapshot::ThreadRow.new(serial: serial, label: label, ractor_id: 1, state: state, exited: exited, run_ns: run,
                            wait_ns: wait, idle_ns: idle, gc_ns: gc, holds: waits, waits: waits,
                            longest_hold_ns: run, longest_wait_ns: wait, released_blocking: blocking,
                            released_preempted: preempted, released_exit: 0, code: nil, io_overlap_wait_ns: overlap,
                            loop: loop)
  end

  # An event loop's row: +turns+ as { bucket => count } of turn lengths (Log2 buckets).
  def loop_row(turns, busy_ms, longest_ms)
    histogram = Array.new(64, 0)
    turns.each { |bucket, count| histogram[bucket] = count }
    Snapshot::LoopRow.of(turns: turns.values.sum, busy_ns: busy_ms * MS, longest_turn_ns: longest_ms * MS,
                         turn_histogram: histogram)
  end

  def snapshot(time_ms, threads, exited: row(0, "(exited threads)", state: :exited), waiting: 0, histogram: [])
    Snapshot.new(source: "socket", pid: 42, time_ns: time_ms * MS, wall_ns: time_ms * MS,
                 held_ns: threads.sum(&:held_ns) + exited.held_ns, run_ns: threads.sum(&:run_ns) + exited.run_ns,
                 gc_ns: threads.sum(&:gc_ns), wait_ns: threads.sum(&:wait_ns) + exited.wait_ns,
                 idle_ns: threads.sum(&:idle_ns) + exited.idle_ns, acquisitions: threads.sum(&:waits),
                 waiting_threads: waiting, releases: { blocking: 1, preempted: 2, exit: 0 },
                 waiters_at_acquire_histogram: histogram, threads: threads, exited_threads: exited)
  end

  def test_json_round_trip_keeps_every_field
    first = snapshot(1000, [row(1, "main", run: 300 * MS, idle: 700 * MS),
                            row(2, "hog", run: 600 * MS, wait: 10 * MS, overlap: 4 * MS)],
                     waiting: 1, histogram: [3, 1, 0, 2])
    copy = Snapshot.from_json(first.to_json)
    assert_equal first.to_h, copy.to_h
    assert_equal %w[main hog], copy.threads.map(&:label)
    assert_equal :run, copy.threads.first.state
    assert_in_delta 0.9, copy.held_ratio
    assert_in_delta 10 * MS, copy.wait_ns_per_s
    assert_equal [0, 4 * MS], copy.threads.map(&:io_overlap_wait_ns)
    assert_equal [3, 1, 0, 2], copy.to_h["waiters_at_acquire_histogram"], "trailing zero buckets are not written"
    assert_equal 64, copy.waiters_at_acquire_histogram.size
  end

  # A snapshot file written before io_overlap_wait_ns existed reads as none.
  def test_a_row_without_io_overlap_reads_as_zero
    hash = snapshot(1000, [row(1, "main", run: 300 * MS, overlap: 5 * MS)]).to_h
    hash["threads"].each { |thread| thread.delete("io_overlap_wait_ns") }
    assert_equal [0], Snapshot.from_h(hash).threads.map(&:io_overlap_wait_ns)
  end

  # A thread's event loop travels as "loop" (only on a thread that has one) and subtracts per
  # interval; its lag is the p99 turn's bucket bound, at most the longest turn.
  def test_an_event_loop_round_trips_and_subtracts_into_the_interval
    ms8 = GVLScope::Log2.bucket(8 * MS) # turns of 8 ms (bucket 23: 4.2-8.4 ms)
    ms300 = GVLScope::Log2.bucket(300 * MS) # bucket 29: 268-537 ms
    before = snapshot(1000, [row(1, "main"), row(2, "loop", loop: loop_row({ ms8 => 100 }, 800, 9))])
    after = snapshot(2000, [row(1, "main"), row(2, "loop", loop: loop_row({ ms8 => 190, ms300 => 1 }, 1820, 300))])
    copy = Snapshot.from_json(after.to_json)
    assert_equal after.to_h, copy.to_h
    refute copy.to_h["threads"][0].key?("loop"), "no loop key on a thread without a loop"
    assert_equal [ms8, ms300].max + 1, copy.to_h["threads"][1]["loop"]["turn_histogram"].size, "no trailing zero buckets"

    interval = copy - before
    loop = interval.threads[1].loop
    assert_nil interval.threads[0].loop
    assert_equal [91, 1020 * MS], [loop.turns, loop.busy_ns]
    assert_equal 300 * MS, loop.longest_turn_ns, "a new longest turn ended in the interval: exact"
    assert_in_delta 1.02, loop.busy_share(interval.interval_ns)
    assert_in_delta 91.0, loop.turns_per_s(interval.interval_ns)
    assert_equal 300 * MS, loop.lag_ns, "90 of 91 turns (98.9%) are 8 ms: the p99 is the 300 ms one (its bucket's bound, cut to the longest)"
    # The next interval's turns are short again: its longest is their bucket's bound, not the 300 ms of before.
    later = snapshot(3000, [row(1, "main"), row(2, "loop", loop: loop_row({ ms8 => 290, ms300 => 1 }, 2620, 300))])
    calm = (later - after).threads[1].loop
    assert_equal [100, GVLScope::Log2.upper(ms8), GVLScope::Log2.upper(ms8)], [calm.turns, calm.longest_turn_ns, calm.lag_ns]
  end

  # A snapshot file written before threads carried their event loop (test/fixtures/diff, a
  # recording of gvlscope's own) reads, with no loop anywhere, and still subtracts.
  def test_an_older_snapshot_without_loops_reads
    file = File.join(GVLScopeTestHelper::ROOT, "test/fixtures/diff/before.snapshots.json")
    refute_includes File.read(file), '"loop"'
    earlier, later = File.foreach(file).first(2).map { |line| Snapshot.from_json(line) }
    assert_operator earlier.threads.size, :>, 0
    assert(earlier.threads.none?(&:loop))
    assert((later - earlier).threads.none?(&:loop))
    assert(earlier.to_h["threads"].none? { |thread| thread.key?("loop") })
  end

  def test_a_bad_loop_is_refused_in_one_line
    hash = snapshot(1000, [row(2, "loop", loop: loop_row({ 23 => 1 }, 8, 8))]).to_h
    hash["threads"][0]["loop"]["turns"] = -1
    error = assert_raises(GVLScope::Error) { Snapshot.from_h(hash) }
    assert_equal "not a gvlscope live snapshot: threads[0].loop.turns is -1, not a whole number from 0 to 2^63", error.message
  end

  def test_an_interval_subtracts_counters_and_keeps_gauges
    before = snapshot(1000, [row(1, "main", run: 100 * MS, idle: 900 * MS),
                             row(2, "worker", run: 500 * MS, wait: 50 * MS, overlap: 10 * MS)])
    after = snapshot(3000, [row(1, "main", state: :idle, run: 150 * MS, idle: 2800 * MS),
                            row(2, "worker", state: :wait, run: 1500 * MS, wait: 400 * MS, overlap: 30 * MS)], waiting: 1)
    interval = after - before
    assert_equal 2000 * MS, interval.interval_ns
    assert_equal 2000 * MS, interval.wall_ns
    assert_equal [50 * MS, 1000 * MS], interval.threads.map(&:run_ns)
    assert_equal [1900 * MS, 0], interval.threads.map(&:idle_ns)
    assert_equal [0, 350 * MS], interval.threads.map(&:wait_ns)
    assert_equal [0, 20 * MS], interval.threads.map(&:io_overlap_wait_ns)
    assert_equal %i[idle wait], interval.threads.map(&:state)
    assert_equal 1, interval.waiting_threads
    assert_in_delta 0.525, interval.held_ratio
    assert_in_delta 175 * MS, interval.wait_ns_per_s
    assert_equal({ blocking: 0, preempted: 0, exit: 0 }, interval.releases)
  end

  # Per-route numbers (GVLScope::Breakdown) travel with the snapshot and subtract per series; a
  # series new in the interval counts whole.
  def test_breakdown_series_round_trip_and_subtract_by_series
    entry = ->(label, count, tags = {}) { { kind: :route, label: label, tags: tags, count: count, run_ns: count * MS, wait_ns: 0, idle_ns: 2 * count * MS, gc_ns: 0, duration_ns: 3 * count * MS, pickup_wait_ns: 0 } }
    before = snapshot(1000, [row(1, "main")]).with(breakdown: [entry.("GET /a", 10), entry.("job", 4, { queue: "x" })])
    after = snapshot(2000, [row(1, "main")]).with(breakdown: [entry.("GET /a", 25), entry.("job", 4, { queue: "x" }), entry.("GET /b", 3)])
    copy = Snapshot.from_json(after.to_json)
    assert_equal after.to_h, copy.to_h
    assert_equal [{ "queue" => "x" }], copy.breakdown.select { |e| e[:label] == "job" }.map { |e| e[:tags] }
    interval = copy - Snapshot.from_json(before.to_json)
    assert_equal({ "GET /a" => [15, 30 * MS], "job" => [0, 0], "GET /b" => [3, 6 * MS] },
                 interval.breakdown.to_h { |e| [e[:label], [e[:count], e[:idle_ns]]] })
    # A snapshot without the key (older files, a scrape) has none; a non-number in it is refused.
    hash = after.to_h.tap { |h| h.delete("breakdown") }
    assert_equal [], Snapshot.from_h(hash).breakdown
    hash["breakdown"] = [{ "kind" => "route", "label" => "x", "count" => "many" }]
    error = assert_raises(GVLScope::Error) { Snapshot.from_h(hash) }
    assert_match(/not a gvlscope live snapshot/, error.message)
  end

  def test_a_thread_that_exited_in_between_leaves_only_its_interval_in_exited_threads
    before = snapshot(1000, [row(1, "main", run: 100 * MS), row(2, "short", run: 300 * MS)])
    # After: "short" exited having run 100 ms more; its 400 ms moved into the exited row.
    after = snapshot(2000, [row(1, "main", run: 600 * MS)], exited: row(0, "(exited threads)", state: :exited, run: 400 * MS))
    interval = after - before
    assert_equal [1], interval.threads.map(&:serial)
    assert_equal 100 * MS, interval.exited_threads.run_ns
    assert_equal 600 * MS, interval.run_ns
  end

  def test_snapshots_of_different_processes_do_not_subtract
    other = Snapshot.from_h(snapshot(1000, []).to_h.merge("pid" => 43))
    error = assert_raises(GVLScope::Error) { snapshot(2000, []) - other }
    assert_match(/pid 43/, error.message)
  end

  # Each code location is a backtrace under the host's GVL: an answer looks up at most
  # CODE_LOCATIONS_MAX, the thread holding or waiting for the GVL among them (issue 28: 5,000
  # threads paused the host 0.2 s per refresh).
  def test_code_locations_are_looked_up_for_a_bounded_number_of_threads
    was_enabled = GVLScope::Metrics.enabled?
    GVLScope::Metrics.enable
    gate = Queue.new
    sleepers = Array.new(Snapshot::CODE_LOCATIONS_MAX + 40) { Thread.new { gate.pop } }
    busy = Thread.new do
      Thread.current.name = "located-busy"
      x = 0
      x += 1 while gate.empty? # holds or waits for the GVL until the end
    end
    Thread.pass until sleepers.all? { |thread| thread.status == "sleep" }
    sleep 0.05 # the busy thread has run: it is in state run or wait, not idle
    snapshot = Snapshot.from_metrics(GVLScope::Metrics.snapshot, stacks: true)
    located = snapshot.threads.select(&:code)
    assert_operator snapshot.threads.size, :>, Snapshot::CODE_LOCATIONS_MAX
    assert_operator located.size, :<=, Snapshot::CODE_LOCATIONS_MAX
    assert_includes located.map(&:label), "located-busy"
  ensure
    (sleepers.size + 1).times { gate << :done } if gate
    [*sleepers, busy].compact.each(&:join)
    GVLScope::Metrics.disable unless was_enabled
  end

  # A turn of a quarter timeslice (25 ms of CRuby's 100) in the interval is a finding; a loop of
  # short turns is none, and the first interval after a long turn no longer has it.
  def test_a_long_turn_of_an_event_loop_is_a_finding
    ms8 = GVLScope::Log2.bucket(8 * MS)
    before = snapshot(1000, [row(2, "loop", loop: loop_row({ ms8 => 100 }, 800, 9))])
    long = snapshot(2000, [row(2, "loop", loop: loop_row({ ms8 => 190, GVLScope::Log2.bucket(25 * MS) => 1 }, 1745, 25))])
    findings = (long - before).findings
    assert_equal [%w[loop_stall loop]], findings.map { |finding| finding.values_at("kind", "thread") }
    assert_equal "Event loop of 'loop': longest turn 25 ms (lag p99 25 ms, 91 turns, busy 95%); its code is unknown " \
                 "live: trace with --fibers to name it", findings.first["title"]
    calm = snapshot(3000, [row(2, "loop", loop: loop_row({ ms8 => 290, GVLScope::Log2.bucket(25 * MS) => 1 }, 2545, 25))])
    assert_empty (calm - long).findings
    assert_empty (snapshot(2000, [row(2, "loop", loop: loop_row({ ms8 => 101 }, 809, 24))]) - before).findings, "24 ms: under the quarter"
  end

  def test_garbage_is_not_a_snapshot
    ['{"version":1}', "[]", "not json", '{"version":1,"source":"socket","threads":"x"}'].each do |text|
      error = assert_raises(GVLScope::Error, text) { Snapshot.from_json(text) }
      assert_match(/not a gvlscope live snapshot/, error.message)
    end
  end

  def test_a_restarted_puma_worker_never_makes_counters_go_down
    worker = ->(index, pid, wall, held) { Snapshot::WorkerRow.new(worker: index, pid: pid, wall_ns: wall, held_ns: held, wait_ns: 0, waiting_threads: 0) }
    scrape = lambda do |time, workers|
      Snapshot.new(source: "prometheus", time_ns: time, processes: workers.size, wall_ns: workers.sum(&:wall_ns),
                   held_ns: workers.sum(&:held_ns), wait_ns: 0, workers: workers)
    end
    before = scrape.call(10_000, [worker.call(0, 100, 9000, 4500), worker.call(1, 101, 9000, 900)])
    # Worker 1 restarted as pid 102 and has counted only 500 ns since.
    after = scrape.call(11_000, [worker.call(0, 100, 10_000, 5000), worker.call(1, 102, 500, 500)])
    interval = after - before
    assert_equal 1000 + 500, interval.wall_ns
    assert_equal 500 + 500, interval.held_ns
    assert_equal 1000, interval.interval_ns
    assert_nil interval.run_ns
  end

  def test_a_cpu_hog_is_found_and_a_calm_interval_finds_nothing
    before = snapshot(0, [row(1, "hog"), row(2, "io")])
    hog = snapshot(1000, [row(1, "hog", run: 950 * MS, waits: 10, preempted: 9, blocking: 0),
                          row(2, "io", run: 5 * MS, wait: 900 * MS, idle: 50 * MS, waits: 9, blocking: 9)])
    kinds = (hog - before).findings.map { |finding| [finding["kind"], finding["thread"]] }
    assert_equal [%w[hog hog], %w[convoy io]], kinds
    calm = snapshot(1000, [row(1, "hog", run: 100 * MS, idle: 900 * MS, waits: 50, blocking: 50),
                           row(2, "io", run: 50 * MS, idle: 950 * MS, wait: 1 * MS, waits: 50, blocking: 50)])
    assert_empty((calm - before).findings)
  end

  def test_contention_needs_a_crowd_at_acquire_and_much_waiting
    before = snapshot(0, [row(1, "a"), row(2, "b")])
    crowded = snapshot(1000, [row(1, "a", run: 500 * MS, wait: 400 * MS, waits: 40, blocking: 40),
                              row(2, "b", run: 400 * MS, wait: 500 * MS, waits: 40, blocking: 40)],
                       histogram: [10, 10, 0, 20])
    assert_equal ["contention"], (crowded - before).findings.map { |f| f["kind"] }
    alone = snapshot(1000, crowded.threads, histogram: [30, 10])
    assert_empty((alone - before).findings.select { |f| f["kind"] == "contention" })
  end
end
