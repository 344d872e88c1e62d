# frozen_string_literal: true

require "test_helper"
require "json"
require "tmpdir"
require "socket"
require "fileutils"
require "gvlscope/analysis/advisor_inputs"
require "gvlscope/live"

# `gvlscope advise`: the model on synthetic numbers, its three inputs (trace, snapshot file,
# live process) giving the same advice for the same numbers, and its errors.
class AdviseTest < Minitest::Test
  include GVLScopeTestHelper

  Advisor = GVLScope::Analysis::Advisor
  Inputs = GVLScope::Analysis::AdvisorInputs
  Snapshot = GVLScope::Live::Snapshot
  MS = 1_000_000

  # A live snapshot whose threads have these cumulative numbers (ns): rows of
  # [label, run, wait, idle, gc]; serials follow the order. +wall+: the span they cover.
  def snapshot(rows, time_ns:, wall_ns:, breakdown: nil)
    threads = rows.each_with_index.map do |(label, run, wait, idle, gc), index|
      Snapshot::ThreadRow.from_h({ "serial" => index + 1, "label" => label, "ractor_id" => 1, "state" => "idle",
                                   "run_ns" => run, "wait_ns" => wait, "idle_ns" => idle, "gc_ns" => gc.to_i })
    end
    held = threads.sum(&:held_ns)
    hash = Snapshot.new(source: "socket", pid: 4242, time_ns: time_ns, wall_ns: wall_ns, held_ns: held,
                        run_ns: threads.sum(&:run_ns), gc_ns: threads.sum(&:gc_ns), wait_ns: threads.sum(&:wait_ns),
                        idle_ns: threads.sum(&:idle_ns), threads: threads).to_h
    hash["breakdown"] = breakdown if breakdown
    hash
  end

  # +threads+ alike workers with these shares of a 10 s window, beside an idle main thread.
  def pool_snapshot(threads:, run:, wait:, idle:, gc: 0.0, wall_ns: 10_000 * MS)
    rows = [["main", 0, 0, wall_ns, 0]] +
           (1..threads).map { |n| ["puma srv tp #{format('%03d', n)}", run * wall_ns, wait * wall_ns, idle * wall_ns, gc * wall_ns].map { |v| v.is_a?(Float) ? v.round : v } }
    snapshot(rows, time_ns: wall_ns, wall_ns: wall_ns)
  end

  def advise_on(hash, **options)
    later = Snapshot.from_h(hash)
    Advisor.new(Inputs.from_live(later, source: "test"), **options).advice
  end

  # --- the model ---

  # Mean value analysis by hand for D = Z = 1: R(1) = 1, X(1) = 1/2; Q(1) = 1/2, R(2) = 1.5,
  # X(2) = 2/2.5 = 0.8; Q(2) = 1.2, R(3) = 2.2, X(3) = 3/3.2; Q(3) = 2.0625, R(4) = 3.0625, X(4) = 4/4.0625.
  def test_the_curve_is_mean_value_analysis_of_one_gvl
    curve = Advisor.curve(1.0, 1.0, 4)
    assert_equal [1, 2, 3, 4], curve.map(&:threads)
    [0.5, 0.8, 3 / 3.2, 4 / 4.0625].zip(curve.map(&:busy)).each { |expected, got| assert_in_delta expected, got, 1e-12 }
    [0.0, 0.5, 1.2, 2.0625].zip(curve.map(&:wait_per_demand)).each { |expected, got| assert_in_delta expected, got, 1e-12 }
  end

  # With no idle at all (CPU-bound), one thread keeps the GVL busy and each more thread only
  # waits: T threads wait (T - 1) holds each.
  def test_cpu_bound_threads_only_add_wait
    Advisor.curve(2.0, 0.0, 8).each do |point|
      assert_in_delta 1.0, point.busy, 1e-12
      assert_in_delta point.threads - 1, point.wait_per_demand, 1e-12
    end
  end

  # The asymptotic bounds of any closed network: throughput x D <= min(1, T x D / (D + Z)).
  def test_the_curve_stays_within_the_asymptotic_bounds
    [[1.0, 0.0], [1.0, 0.5], [1.0, 3.0], [1.0, 9.0], [0.2, 40.0]].each do |d, z|
      previous = 0.0
      Advisor.curve(d, z, 40).each do |point|
        assert_operator point.busy, :<=, [1.0, point.threads * d / (d + z)].min + 1e-12, "D=#{d} Z=#{z} T=#{point.threads}"
        assert_operator point.busy, :>=, previous, "more threads never lower the GVL's throughput"
        previous = point.busy
      end
    end
  end

  def test_cpu_bound_gets_one_thread_and_a_process_per_core
    advice = advise_on(pool_snapshot(threads: 5, run: 0.2, wait: 0.8, idle: 0.0), cores: 4, processes: 1)
    assert_equal 1, advice.threads
    assert_equal 4, advice.processes, "the GVL is the limit: more processes, not threads"
    assert_in_delta 1.0, advice.no_collision_threads, 1e-9
    text = GVLScope::Formats::AdviceText.new(advice).to_s
    assert_match(/^gvlscope advise: 1 thread per process, 4 processes \(now 5 threads x 1 process, 4 cores\)$/, text)
    assert_match(/4 processes \(one GVL each\) use the free cores/, advice.processes_reasoning)
  end

  def test_cpu_bound_with_no_free_core_keeps_the_processes
    advice = advise_on(pool_snapshot(threads: 5, run: 0.2, wait: 0.8, idle: 0.0), cores: 2, processes: 2)
    assert_equal [1, 2], [advice.threads, advice.processes]
    assert_match(/no core is free for another process; keep 2, each with 1 thread\./, advice.processes_reasoning)
  end

  # 90 % idle: 1 / run share = 10 threads keep the GVL busy without collisions; with collisions
  # the model needs more (exact MVA for D = 1, Z = 9: 13 threads reach 94.6 %, 14 reach 96.6 %).
  def test_io_heavy_gets_many_threads
    advice = advise_on(pool_snapshot(threads: 5, run: 0.1, wait: 0.0, idle: 0.9), cores: 1)
    assert_in_delta 10.0, advice.no_collision_threads, 1e-9
    assert_equal 14, advice.threads
    assert_equal 1, advice.processes
    assert_operator advice.point(13).busy, :<, 0.95
    assert_operator advice.point(14).busy, :>=, 0.95
    assert_equal 8, advice.sensitivity[:idle_halved] # Z/D = 4.5: 95 % at 8
    assert_operator advice.sensitivity[:idle_doubled], :>, 14
  end

  # Half run, half idle: 2 threads without collisions, 4 with (MVA above: 93.75 % at 3, 98.5 % at 4).
  def test_mixed_gets_a_few_threads
    advice = advise_on(pool_snapshot(threads: 5, run: 0.3, wait: 0.4, idle: 0.3), cores: 1)
    assert_in_delta 2.0, advice.no_collision_threads, 1e-9
    assert_equal 4, advice.threads
    reasoning = advice.reasoning.join("\n")
    assert_match(/1 \/ run share = 2\.0: that many threads keep the GVL busy/, reasoning)
    assert_match(/4 threads keep the GVL busy 98 % of the time, the fewest to reach 95 %/, reasoning)
    assert_match(/At the current 5 threads the model predicts the GVL busy 100 %; measured 150 %/, reasoning,
                 "5 threads x 30 % run: the measured held share is the pool's (no other thread)")
  end

  # 99 % idle needs ~140 threads for 95 %: --max-threads caps it, and says so.
  def test_max_threads_caps_the_count
    advice = advise_on(pool_snapshot(threads: 5, run: 0.01, wait: 0.0, idle: 0.99), cores: 1, max_threads: 32)
    assert_equal [32, :max_threads], [advice.threads, advice.limited_by]
    assert_operator advice.point(32).busy, :<, 0.95
    assert_match(/That many threads are past --max-threads 32: 32 threads keep the GVL busy 32 %/, advice.reasoning.join("\n"))
    refute_match(/the fewest to reach/, advice.reasoning.join("\n"))
  end

  # The pool is a group of same-named threads, even when a lone thread (main) held the GVL longer.
  def test_the_pool_is_a_group_of_threads
    wall = 10_000 * MS
    rows = [["main", 6_000 * MS, 0, 4_000 * MS, 0], ["worker 1", 1_000 * MS, 0, 9_000 * MS, 0],
            ["worker 2", 1_000 * MS, 0, 9_000 * MS, 0]]
    workload = Inputs.from_live(Snapshot.from_h(snapshot(rows, time_ns: wall, wall_ns: wall)), source: "test")
    assert_equal ["worker #", 2, 6_000 * MS], [workload.pool, workload.threads, workload.other_held_ns]
    alone = Inputs.from_live(Snapshot.from_h(snapshot(rows.first(2), time_ns: wall, wall_ns: wall)), source: "test")
    assert_equal ["main", 1], [alone.pool, alone.threads], "no group: the thread that held the GVL longest"
  end

  # Other threads' holds (a reactor) are GVL time the requests need: charged to the pool.
  def test_other_threads_holds_are_charged_to_the_pool
    wall = 10_000 * MS
    rows = [["reactor", wall / 10, 0, wall * 9 / 10, 0]] + (1..4).map { |n| ["worker #{n}", wall / 10, 0, wall * 9 / 10, 0] }
    advice = advise_on(snapshot(rows, time_ns: wall, wall_ns: wall), cores: 1)
    assert_equal "worker #", advice.workload.pool
    assert_equal 4, advice.current_threads
    assert_in_delta 1.25, advice.workload.charge, 1e-9
    assert_in_delta 0.125 / (0.125 + 0.9), advice.run_share, 1e-9
  end

  # The percentages advise prints (a share of time, never a ratio of two holds: at most 100).
  def percentages(text) = text.scan(/(\d+(?:\.\d+)?) ?%/).map { |(number)| number.to_f }

  # One CPU-bound thread beside a pool of six that waits 89 % of its time: no thread count fixes
  # that, and advise says so first, naming the thread and its code (as the report's Hog does).
  def test_a_hog_beside_the_pool_is_named_before_any_count
    wall = 10_000 * MS
    rows = [["pricer", 9_990 * MS, 10 * MS, 0, 0]] + (1..6).map { |n| ["worker #{n}", 1 * MS, 8_880 * MS, 1_119 * MS, 0] }
    hash = snapshot(rows, time_ns: wall, wall_ns: wall)
    hash["threads"][0]["code"] = { "holding" => "`Pricer#spin` (pricer.rb:8)" }
    Dir.mktmpdir do |dir|
      path = File.join(dir, "snap.json")
      File.write(path, JSON.generate(hash))
      out, err, status = gvlscope("advise", "--snapshot", path, "--cores", "2")
      assert status.success?, err
      assert_equal "gvlscope advise: no thread count fixes this: 'pricer' held the GVL 99.9 % of the time, in " \
                   "`Pricer#spin` (pricer.rb:8)", out.lines.first.chomp
      assert_includes out, "  It is not one of the pool's threads: while it runs Ruby code, every other thread waits"
      assert_includes out, "GVL held 100.0 % of the time: the pool 0.1 %, other threads 99.9 % (charged to the pool's work)"
      assert_operator percentages(out).max, :<=, 100, out
      json, err, status = gvlscope("advise", "--snapshot", path, "--cores", "2", "--json")
      assert status.success?, err
      assert_equal({ "label" => "pricer", "held_ns" => 9_990 * MS, "share" => 0.999, "code" => "`Pricer#spin` (pricer.rb:8)",
                     "in_pool" => false }, JSON.parse(json)["hog"].except("reason"))
    end
  end

  # The recorded hog (test/fixtures/traces/hog.gvl) with 'echo' as the pool: the hog is named
  # with the code the trace sampled it in.
  def test_a_hog_in_a_trace_is_named_with_its_code
    out, err, status = gvlscope("advise", File.join(ROOT, "test/fixtures/traces/hog.gvl"), "--threads", "echo", "--cores", "2")
    assert status.success?, err
    assert_equal "gvlscope advise: no thread count fixes this: 'thread 2 (hog.rb:15)' held the GVL 98.8 % of the time, " \
                 "in `Counter#spin` (hog.rb:8)", out.lines.first.chomp
    assert_operator percentages(out).max, :<=, 100, out
  end

  # A pool that is one CPU-bound thread is the model's own case (one thread, a process per core):
  # no hog beside it.
  def test_a_lone_cpu_bound_pool_is_no_hog
    assert_nil advise_on(pool_snapshot(threads: 1, run: 0.99, wait: 0.0, idle: 0.01)).workload.hog
  end

  # --- per request (Breakdown entries) ---

  def breakdown(count:, run_ms:, wait_ms:, idle_ms:)
    [{ "kind" => "route", "label" => "GET /", "tags" => {}, "count" => count, "run_ns" => count * run_ms * MS,
       "wait_ns" => count * wait_ms * MS, "idle_ns" => count * idle_ms * MS, "gc_ns" => 0,
       "duration_ns" => count * (run_ms + wait_ms + idle_ms) * MS }]
  end

  def test_breakdown_entries_give_per_request_numbers_and_a_wait_budget
    wall = 10_000 * MS
    earlier = snapshot([["worker 1", 0, 0, 0, 0], ["worker 2", 0, 0, 0, 0]], time_ns: 0, wall_ns: 0,
                       breakdown: breakdown(count: 0, run_ms: 0, wait_ms: 0, idle_ms: 0))
    # Per thread the workers look idle-heavy (idle between requests); per request they are not.
    later = snapshot([["worker 1", 2_000 * MS, 500 * MS, 7_500 * MS, 0], ["worker 2", 2_000 * MS, 500 * MS, 7_500 * MS, 0]],
                     time_ns: wall, wall_ns: wall, breakdown: breakdown(count: 2_000, run_ms: 2, wait_ms: 0.5, idle_ms: 2))
    Dir.mktmpdir do |dir|
      path = File.join(dir, "snap.json")
      File.write(path, JSON.generate([earlier, later]))
      later_snapshot, earlier_snapshot = GVLScope::Live::Snapshot.read_file(path)
      workload = Inputs.from_live(later_snapshot, earlier_snapshot, source: "snap.json")
      assert_equal [:request, 2_000], [workload.unit, workload.count]
      advice = Advisor.new(workload, cores: 1).advice
      assert_in_delta 2 * MS, advice.demand_ns, 1
      assert_in_delta 2.0, advice.no_collision_threads, 1e-9
      assert_equal 4, advice.threads
      # MVA at D = Z = 2 ms: W(3) = 1.2 D = 2.4 ms, W(4) = 2.0625 D = 4.1 ms.
      assert_in_delta 2.4 * MS, advice.wait_ns_at(3), 1
      capped = Advisor.new(workload, cores: 1, max_wait_ms: 3.0).advice
      assert_equal [3, :wait], [capped.threads, capped.limited_by]
      assert_match(/Lowered to 3 by --max-wait-ms 3: one more thread would raise the GVL wait per request to 4\.1 ms/,
                   capped.reasoning.join("\n"))

      out, err, status = gvlscope("advise", "--snapshot", path, "--cores", "1")
      assert status.success?, err
      assert_match(%r{^  per request \(2000 requests\) +run 44\.4 %   GVL wait 11\.1 %   idle 44\.4 %   gc 0\.0 %$}, out)
      assert_match(/^  per request: run 2\.0 ms, GVL wait 0\.5 ms, idle 2\.0 ms, gc 0\.0 ms$/, out)
      assert_match(/^  4 +98\.5 % +4\.1 ms +<- recommended$/, out)
    end
  end

  # A snapshot file given as FILE is read as a snapshot, as `diff` takes it (Analysis::InputKind),
  # not as a gvl-tracing trace; a saved /metrics page gets one line naming the way advise reads it.
  def test_advise_file_detects_a_snapshot_file_as_diff_does
    snapshots = File.join(ROOT, "test/fixtures/diff/after.snapshots.json")
    as_option, err, status = gvlscope("advise", "--snapshot", snapshots, "--cores", "1")
    assert status.success?, err
    as_file, err, status = gvlscope("advise", snapshots, "--cores", "1")
    assert status.success?, err
    assert_equal as_option, as_file

    _out, err, status = gvlscope("advise", File.join(ROOT, "test/fixtures/diff/after.prom"))
    assert_equal 1, status.exitstatus
    assert_equal ["gvlscope: #{File.join(ROOT, 'test/fixtures/diff/after.prom')}: is a /metrics scrape: advise reads " \
                  "/metrics live, twice (--url URL --current-threads N)"], err.lines(chomp: true)
  end

  # Two routes as the lab's mixed mix reads per endpoint: 4.9 ms of Ruby and no IO, 1.6 ms of Ruby
  # and 9 ms of IO (cumulative sums of +count+ requests each).
  def two_routes(count)
    [["cpu", 4.9, 0.0], ["io", 1.6, 9.0]].map do |label, run_ms, idle_ms|
      { "kind" => "route", "label" => label, "tags" => {}, "count" => count, "run_ns" => (count * run_ms * MS).round,
        "wait_ns" => count * 5 * MS, "idle_ns" => (count * idle_ms * MS).round, "gc_ns" => 0,
        "duration_ns" => (count * (run_ms + 5 + idle_ms) * MS).round }
    end
  end

  # The routes are kept apart: the mean request (3.25 ms of hold, 4.5 ms of IO) would keep the GVL
  # 96 % busy at 4 threads (mean value analysis), the two kinds only 94 % (GVLSimulation): a thread
  # on the CPU route overlaps no IO. The pool's IO hidden in GVL wait goes to the route with idle.
  def test_routes_that_differ_are_modelled_apart
    wall = 10_000 * MS
    rows = (1..5).map { |n| ["puma srv tp #{n}", 1_600 * MS, 5_000 * MS, 3_400 * MS, 0] }
    earlier = snapshot(rows.map { |label, *| [label, 0, 0, 0, 0] }, time_ns: 0, wall_ns: 0, breakdown: two_routes(0))
    later = snapshot(rows, time_ns: wall, wall_ns: wall, breakdown: two_routes(1_000))
    workload = Inputs.from_live(Snapshot.from_h(later), Snapshot.from_h(earlier), source: "test")
    assert_equal [:request, 2_000, %w[cpu io]], [workload.unit, workload.count, workload.kinds.map(&:label)]
    advice = Advisor.new(workload, cores: 1).advice
    assert_equal [5, 4], [advice.threads, advice.sensitivity[:one_kind]]
    assert_in_delta 3.25 * MS, advice.demand_ns, 1
    assert_in_delta 4.5 * MS, advice.idle_per_request_ns, 1
    assert_operator advice.point(4).busy, :<, Advisor.curve(3.25, 4.5, 4)[3].busy - 0.01
    assert_match(/2 kinds of request kept apart \(cpu 50 %: D 4\.9 ms, Z 0\.0 ms; io 50 %: D 1\.6 ms, Z 9\.0 ms\).* As one mean request the answer would be 4 threads\./,
                 advice.reasoning.join("\n"))
    json = GVLScope::Formats::AdviceJSON.new(advice).to_h
    assert_equal [["cpu", 4_900_000, 0], ["io", 1_600_000, 9_000_000]],
                 json[:model][:kinds].map { |kind| kind.values_at(:label, :demand_ns, :idle_ns) }
    # The curve goes a few counts past 99 % busy, not to --max-threads.
    assert_operator advice.curve.size, :<, Advisor::MAX_THREADS

    # 1 s of the pool's GVL wait overlapped IO: all of it is the io route's (the cpu route has no idle).
    workload.io_overlap_wait_ns = 1_000 * MS
    overlapped = Advisor.new(workload, cores: 1).advice
    assert_equal [0.0, 10.0], overlapped.kinds.map { |kind| (kind.idle / MS).round(6) }
    assert_equal [0.0, 1.0], overlapped.kinds.map { |kind| (kind.overlap / MS).round(6) }

    # Kinds alike give the one-kind answer.
    alike = [["a", 2.0, 2.0], ["b", 2.0, 2.0]].map do |label, run_ms, idle_ms|
      { kind: "route", label: label, tags: {}, count: 1_000, run_ns: run_ms * 1_000 * MS, wait_ns: 0,
        idle_ns: idle_ms * 1_000 * MS, gc_ns: 0 }
    end
    same = Inputs.from_live(Snapshot.from_h(later), Snapshot.from_h(earlier), source: "test", breakdown: alike)
    assert_equal Advisor.new(same.dup.tap { |w| w.kinds = nil }, cores: 1).advice.threads, Advisor.new(same, cores: 1).advice.threads
  end

  # The kinds travel in a snapshot file; `advise --snapshot` says how it modelled them.
  def test_advise_on_a_snapshot_with_two_routes_simulates_them
    wall = 10_000 * MS
    rows = (1..5).map { |n| ["puma srv tp #{n}", 1_600 * MS, 5_000 * MS, 3_400 * MS, 0] }
    Dir.mktmpdir do |dir|
      path = File.join(dir, "routes.json")
      File.write(path, JSON.generate(snapshot(rows, time_ns: wall, wall_ns: wall, breakdown: two_routes(1_000))))
      out, err, status = gvlscope("advise", "--snapshot", path, "--cores", "1")
      assert status.success?, err
      assert_match(/\Agvlscope advise: 5 threads per process/, out)
      assert_match(/simulated request by request with 2 kinds\s+of request/, out)
      json, err, status = gvlscope("advise", "--snapshot", path, "--cores", "1", "--json")
      assert status.success?, err
      model = JSON.parse(json)["model"]
      assert_equal %w[cpu io], model["kinds"].map { |kind| kind["label"] }
      assert_equal 4, model["sensitivity"]["one_kind"]
      # Each kind's times exact: the lab's model says 4 for these endpoints (research/thread_sweep_model.rb).
      assert_equal 4, model["sensitivity"]["exact_times"]

      # A hand-edited file: a route's sums below zero count as none; a sum that is not a number is
      # one line naming the file.
      routes = two_routes(1_000)
      routes[1]["run_ns"] = -5
      routes[1]["idle_ns"] = -7
      File.write(path, JSON.generate(snapshot(rows, time_ns: wall, wall_ns: wall, breakdown: routes)))
      out, err, status = gvlscope("advise", "--snapshot", path, "--cores", "1")
      assert status.success?, err
      assert_match(/io 50 %: D 0\.0 ms, Z 0\.0 ms/, out.gsub(/\s+/, " "))
      routes[1]["count"] = "lots"
      File.write(path, JSON.generate(snapshot(rows, time_ns: wall, wall_ns: wall, breakdown: routes)))
      out, err, status = gvlscope("advise", "--snapshot", path, "--cores", "1")
      assert_equal [1, ""], [status.exitstatus, out]
      assert_equal 1, err.lines.size, err
      assert_match(/\Agvlscope: .*routes\.json: not a gvlscope live snapshot/, err)
    end
  end

  # --- three inputs, same numbers, same advice ---

  # 4 workers, 100 cycles of 10 ms: worker k (0..3) waits 0.5 ms while worker k-1 runs, runs 1 ms,
  # then is idle until its next cycle; after the last cycle each waits again until the trace stops
  # at 1004.5 ms (a trace cut while a thread is idle would not say why it was idle). "Main Thread"
  # is idle throughout. As a gvl-tracing trace (a trace gvlscope reads), a pair of live snapshots
  # in a file, and a live process serving those snapshots on its socket.
  CYCLES = 100
  WORKERS = 4
  END_US = CYCLES * 10_000 + 4_500

  def gvl_tracing_trace(path)
    events = [{ "ph" => "M", "pid" => 7, "tid" => 0, "name" => "thread_name", "args" => { "name" => "Main Thread" } },
              { "ph" => "B", "pid" => 7, "tid" => 0, "ts" => 0, "name" => "started_tracing" },
              { "ph" => "B", "pid" => 7, "tid" => 0, "ts" => 0, "name" => "waiting" }]
    WORKERS.times do |k|
      tid = k + 1
      events << { "ph" => "M", "pid" => 7, "tid" => tid, "name" => "thread_name", "args" => { "name" => "worker #{tid}" } }
      events << { "ph" => "B", "pid" => 7, "tid" => tid, "ts" => 0, "name" => "waiting" }
      CYCLES.times do |cycle|
        base = cycle * 10_000 + k * 1_000 # us
        events << { "ph" => "B", "pid" => 7, "tid" => tid, "ts" => base + 500, "name" => "wants_gvl" }
        events << { "ph" => "B", "pid" => 7, "tid" => tid, "ts" => base + 1_000, "name" => "running" }
        events << { "ph" => "B", "pid" => 7, "tid" => tid, "ts" => base + 2_000, "name" => "waiting" }
      end
      events << { "ph" => "B", "pid" => 7, "tid" => tid, "ts" => CYCLES * 10_000 + k * 1_000 + 500, "name" => "wants_gvl" }
    end
    events << { "ph" => "B", "pid" => 7, "tid" => 0, "ts" => END_US, "name" => "stopped_tracing" }
    File.write(path, JSON.generate({ "traceEvents" => events }))
  end

  # The same per-thread numbers as live snapshots: zeros at t0, the totals one window later.
  # Worker k: run 100 x 1 ms; wait 100 x 0.5 ms + the last (4 - k) ms; idle the rest.
  def equivalent_snapshots
    wall = END_US * 1_000
    rows = [["main", 0, 0, wall, 0]] + (0...WORKERS).map do |k|
      run = CYCLES * MS
      wait = CYCLES * MS / 2 + (4 - k) * MS
      ["worker #{k + 1}", run, wait, wall - run - wait, 0]
    end
    zero = rows.map { |label, *| [label, 0, 0, 0, 0] }
    [snapshot(zero, time_ns: 5 * MS, wall_ns: 0), snapshot(rows, time_ns: 5 * MS + wall, wall_ns: wall)]
  end

  def test_trace_snapshot_file_and_live_process_give_the_same_advice
    Dir.mktmpdir do |dir|
      trace = File.join(dir, "workers.json")
      gvl_tracing_trace(trace)
      snapshots = File.join(dir, "snapshots.json")
      File.write(snapshots, JSON.generate(equivalent_snapshots))
      from_trace = advise_json("advise", trace, "--cores", "2")
      from_file = advise_json("advise", "--snapshot", snapshots, "--cores", "2")
      from_live = with_live_process(equivalent_snapshots) do |pid|
        advise_json("advise", "--pid", pid.to_s, "--interval", "0.05", "--cores", "2")
      end
      [from_file, from_live].each do |other|
        assert_equal from_trace["recommendation"], other["recommendation"]
        assert_equal from_trace["model"]["curve"], other["model"]["curve"]
        from_trace["measured"]["shares"].each { |state, share| assert_in_delta share, other["measured"]["shares"][state], 1e-9 }
        assert_equal({ "name" => "worker #", "threads" => 4 }, other["measured"]["pool"])
      end
      # Per worker 100 ms run, 850.5 + k ms idle: 1 / run share = (400 + 3408) / 400 = 9.52; exact MVA
      # reaches 95 % at 13 threads.
      assert_equal({ "threads" => 13, "processes" => 2, "cores" => 2, "current_threads" => 4, "current_processes" => 1,
                     "limited_by" => "throughput" }, from_trace["recommendation"])
      assert_in_delta 3808.0 / 400, from_trace["model"]["no_collision_threads"], 1e-3
      assert_in_delta 400.0 / (400 + 210 + 3408), from_trace["measured"]["shares"]["run"], 1e-6
      assert_in_delta 400.0 / 1004.5, from_trace["measured"]["held_ratio"], 1e-6
    end
  end

  def advise_json(*args)
    out, err, status = gvlscope(*args, "--json")
    assert status.success?, "gvlscope #{args.join(' ')}: #{err}"
    json = JSON.parse(out)
    assert_equal 1, json["gvlscope_advice"]
    json
  end

  # A process whose live socket (the real LiveServer, its protocol and paths) answers the given
  # snapshot Hashes in turn, the last one from then on.
  def with_live_process(hashes)
    program = <<~RUBY
      require "gvlscope"
      require "gvlscope/integrations/live_server"
      answers = JSON.parse(ARGV[0]).map { |hash| GVLScope::Live::Snapshot.from_h(hash) }
      GVLScope::LiveServer.prepend(Module.new do
        define_method(:snapshot_json) { |**| "\#{JSON.generate({ "snapshot" => (answers.size > 1 ? answers.shift : answers.first).to_h })}\n" }
      end)
      GVLScope::LiveServer.start
      puts Process.pid
      $stdout.flush
      sleep # until the test ends it (TERM)
    RUBY
    reader, writer = IO.pipe
    pid = Process.spawn(RbConfig.ruby, "-I", File.join(ROOT, "lib"), "-rjson", "-e", program, JSON.generate(hashes), out: writer)
    writer.close
    assert_equal pid, Integer(reader.gets), "the live process did not start"
    yield pid
  ensure
    if pid
      Process.kill(:TERM, pid)
      Process.wait(pid)
    end
    reader&.close
  end

  # --- a /metrics URL (the Puma plugin's Prometheus text) ---

  # Serves HTTP answers on a loopback port: the n-th (from 0) is body.call(n).
  def with_metrics_server(body)
    server = TCPServer.new("127.0.0.1", 0)
    served = -1
    thread = Thread.new do
      loop do
        client = server.accept
        while (line = client.gets) && line != "\r\n"; end
        text = body.call(served += 1)
        client.write("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: #{text.bytesize}\r\nConnection: close\r\n\r\n#{text}")
        client.close
      end
    rescue IOError
      nil
    end
    yield "http://127.0.0.1:#{server.addr[1]}/metrics"
  ensure
    server&.close
    thread&.join(1)
  end

  # Two Puma workers; every 10 s each holds the GVL 5 s and has on average 1 thread waiting.
  def exposition(wall_s, held_s, wait_s)
    lines = ["# TYPE gvlscope_wall_seconds_total counter", "# TYPE gvlscope_gvl_held_seconds_total counter",
             "# TYPE gvlscope_gvl_wait_seconds_total counter"]
    [0, 1].each do |worker|
      labels = %(worker="#{worker}",pid="#{100 + worker}")
      lines << "gvlscope_wall_seconds_total{#{labels}} #{wall_s}"
      lines << "gvlscope_gvl_held_seconds_total{#{labels}} #{held_s}"
      lines << "gvlscope_gvl_wait_seconds_total{#{labels}} #{wait_s}"
    end
    lines.join("\n") + "\n"
  end

  # --- IO in flight during a GVL wait ---

  def test_the_traces_rule_is_the_hooks
    assert_equal GVLScope::Native::QUICK_RELEASE_NS, Inputs::QUICK_RELEASE_NS
    assert_equal GVLScope::Native::OVERLAP_HOLD_NS, Inputs::OVERLAP_HOLD_NS
  end

  # 2 workers, 100 cycles of 10 ms: wait 0.5 ms, run 0.9 ms, a write that returns at once (idle
  # 0.05 ms), 1 ms of wait while its answer is on its way, 0.05 ms of run to call the read, then
  # the read blocks until the next cycle. As a trace (whose intervals the advisor reads by the
  # hook's rule) and as live snapshots whose counters the hook would have: the same advice, with
  # the 1 ms per cycle counted as the requests' IO.
  def overlap_trace(path)
    events = [{ "ph" => "M", "pid" => 7, "tid" => 0, "name" => "thread_name", "args" => { "name" => "Main Thread" } },
              { "ph" => "B", "pid" => 7, "tid" => 0, "ts" => 0, "name" => "started_tracing" },
              { "ph" => "B", "pid" => 7, "tid" => 0, "ts" => 0, "name" => "waiting" }]
    2.times do |k|
      tid = k + 1
      events << { "ph" => "M", "pid" => 7, "tid" => tid, "name" => "thread_name", "args" => { "name" => "worker #{tid}" } }
      events << { "ph" => "B", "pid" => 7, "tid" => tid, "ts" => 0, "name" => "waiting" }
      CYCLES.times do |cycle|
        base = cycle * 10_000 + k * 5_000 + 2_000 # us
        [[0, "wants_gvl"], [500, "running"], [1_400, "waiting"], [1_450, "wants_gvl"], [2_450, "running"],
         [2_500, "waiting"]].each { |at, name| events << { "ph" => "B", "pid" => 7, "tid" => tid, "ts" => base + at, "name" => name } }
      end
      events << { "ph" => "B", "pid" => 7, "tid" => tid, "ts" => CYCLES * 10_000 + 3_000, "name" => "wants_gvl" }
    end
    events << { "ph" => "B", "pid" => 7, "tid" => 0, "ts" => CYCLES * 10_000 + 4_000, "name" => "stopped_tracing" }
    File.write(path, JSON.generate({ "traceEvents" => events }))
  end

  def test_io_in_flight_during_a_wait_counts_as_the_requests_io
    Dir.mktmpdir do |dir|
      trace = File.join(dir, "overlap.json")
      overlap_trace(trace)
      from_trace = Inputs.from_report(GVLScope::Analysis::Report.new(GVLScope::Model.timeline(trace)))
      assert_equal 2 * CYCLES * MS, from_trace.io_overlap_wait_ns, "1 ms per cycle per worker"

      # The same counters as a live snapshot: per worker and cycle run 0.95 ms and wait 1.5 ms (and
      # the last wait, 1 ms, until the trace stops), the rest idle.
      wall = (CYCLES * 10_000 + 4_000) * 1_000
      run = CYCLES * 950_000
      wait = CYCLES * 1_500_000 + MS
      rows = [["main", 0, 0, wall, 0]] + (1..2).map { |k| ["worker #{k}", run, wait, wall - run - wait, 0] }
      hash = snapshot(rows, time_ns: wall, wall_ns: wall)
      hash["threads"].each { |t| t["io_overlap_wait_ns"] = CYCLES * MS if t["label"].start_with?("worker") }
      from_live = Inputs.from_live(Snapshot.from_h(hash), source: "test")
      assert_equal from_trace.io_overlap_wait_ns, from_live.io_overlap_wait_ns
      %i[run_ns wait_ns idle_ns].each { |counter| assert_equal from_trace.public_send(counter), from_live.public_send(counter), counter }

      advice = Advisor.new(from_live, cores: 1).advice
      assert_equal Advisor.new(from_trace, cores: 1).advice.threads, advice.threads
      # The model's idle is the measured idle plus the overlapped wait; without it the answer is lower.
      d = from_live.held_ns.to_f
      expected = Advisor.curve(d, (from_live.idle_ns + from_live.io_overlap_wait_ns).to_f).find { |p| p.busy >= 0.95 }.threads
      assert_equal expected, advice.threads
      without = Advisor.curve(d, from_live.idle_ns.to_f).find { |p| p.busy >= 0.95 }.threads
      assert_operator without, :<, expected
      assert_equal without, advice.sensitivity[:without_io_overlap]
      assert_match(/Idle includes the \d+\.\d % of the time the pool waited for the GVL while IO it had started was on its way/,
                   advice.reasoning.first)
      assert(advice.what_would_change.any? { |line| line.include?("the answer #{Advisor.count(without, 'thread')}") })
    end
  end

  def test_a_metrics_url_with_the_current_thread_count
    with_metrics_server(->(n) { exposition(100 + 10 * n, 20 + 5 * n, 30 + 10 * n) }) do |url|
      json = advise_json("advise", "--url", url, "--interval", "0.05", "--current-threads", "3", "--cores", "4")
      # Per process: 3 threads x 10 s = 30 thread-seconds: held 5, waiting 10, idle 15.
      shares = json["measured"]["shares"]
      assert_in_delta 5.0 / 30, shares["run"], 1e-6
      assert_in_delta 10.0 / 30, shares["wait"], 1e-6
      assert_in_delta 15.0 / 30, shares["idle"], 1e-6
      assert_in_delta 4.0, json["model"]["no_collision_threads"], 1e-3
      assert_equal 2, json["recommendation"]["current_processes"], "the scrape's two workers are the processes now"
      assert_equal 4, json["recommendation"]["processes"]
      curve = GVLScope::Analysis::Advisor.curve(1.0, 3.0, 64)
      assert_equal curve.find { |p| p.busy >= 0.95 }.threads, json["recommendation"]["threads"]

      _out, err, status = gvlscope("advise", "--url", url, "--interval", "0.05")
      assert_equal 1, status.exitstatus
      assert_match(/has no per-thread numbers \(a Prometheus scrape\): give --current-threads N/, err)
      _out, err, status = gvlscope("advise", "--url", url, "--interval", "0.05", "--current-threads", "1")
      assert_equal 1, status.exitstatus
      assert_match(/--current-threads 1: fewer than the threads .* holding or waiting for the GVL \(1\.5 on average\)/, err)
    end
  end

  # --- a real trace ---

  # A pool fed by a Queue: its workers wait for work on the Queue (idle, lock) and do their work's
  # IO in sleep. The trace tells the two apart; only the sleep counts as the work's idle.
  def test_a_trace_leaves_out_idle_waiting_for_work
    Dir.mktmpdir do |dir|
      trace = File.join(dir, "pool.gvl")
      trace_program(trace, <<~RUBY)
        jobs = Queue.new
        workers = 3.times.map do |n|
          Thread.new do
            Thread.current.name = "worker \#{n}"
            while (job = jobs.pop)
              x = 0
              x += 1 while x < 100_000 # some Ruby
              sleep 0.004             # the job's IO
            end
          end
        end
        sleep 0.05 # no work yet: the workers wait on the Queue
        60.times { jobs << 1 }
        sleep 0.2
        3.times { jobs << nil }
        workers.each(&:join)
      RUBY
      report = GVLScope::Analysis::Report.new(GVLScope::Model.timeline(trace))
      workload = Inputs.from_report(report)
      assert_equal ["worker #", 3], [workload.pool, workload.threads]
      idle_by_reason = Hash.new(0)
      report.timeline.threads.each_value do |thread|
        next unless thread.label.start_with?("worker ")

        thread.intervals.each { |i| idle_by_reason[i.reason] += i.duration_ns if i.state == :idle }
      end
      # Physically: each worker waited >= 50 ms on the Queue before the jobs came; 60 jobs slept >= 4 ms.
      assert_operator idle_by_reason[:lock], :>=, 3 * 40 * MS, idle_by_reason.inspect
      # (a sleep whose release site was not recorded is io_sleep: IO and sleep look alike in GVL events)
      assert_operator idle_by_reason[:sleep] + idle_by_reason[:io_sleep], :>=, 60 * 4 * MS, idle_by_reason.inspect
      # The Queue waits are left out, the sleeps are the work's idle.
      assert_equal idle_by_reason.values_at(*Advisor::WORK_IDLE_REASONS).sum, workload.idle_ns
      assert_equal idle_by_reason.values.sum - workload.idle_ns, workload.excluded_idle_ns
      assert_operator workload.excluded_idle_ns, :>=, idle_by_reason[:lock]
      chosen = Inputs.from_report(report, threads: "worker 0")
      assert_equal 1, chosen.threads
      # The engine's sums give the same workload in its one pass (no pass collecting every interval).
      scan = GVLScope::Model::Scan.open(trace)
      assert_equal workload.to_h, Inputs.from_report(GVLScope::Analysis::Report.new(scan)).to_h
      assert_equal 1, scan.passes
    end
  end

  # The snapshot file `gvlscope top PID --once --json` writes (the contract between the two
  # commands), from a real process with its live socket open.
  def test_a_snapshot_file_from_gvlscope_top
    Dir.mktmpdir do |dir|
      program = File.join(dir, "loop.rb")
      File.write(program, <<~RUBY)
        3.times.map do |n|
          Thread.new do
            Thread.current.name = "worker \#{n}"
            loop { 20_000.times { }; sleep 0.002 }
          end
        end
        $stdout.puts "ready"
        $stdout.flush
        sleep # until the test ends it (TERM): a loaded machine may take longer than any fixed time
      RUBY
      env = { "GVLSCOPE_LIVE" => "1", "GVLSCOPE_TRACE" => "0", "RUBYOPT" => "-I#{File.join(ROOT, 'lib')} -rgvlscope/autorun" }
      IO.popen(env, [RbConfig.ruby, program]) do |io|
        assert_equal "ready\n", io.gets
        snap = File.join(dir, "snap.json")
        out, err, status = gvlscope("top", io.pid.to_s, "--once", "--json", "--interval", "0.5")
        assert status.success?, err
        File.write(snap, out)
        json = advise_json("advise", "--snapshot", snap, "--cores", "1")
        assert_equal({ "name" => "worker #", "threads" => 3 }, json["measured"]["pool"])
        assert_in_delta 0.5e9, json["measured"]["window_ns"], 0.2e9
        assert_operator json["measured"]["shares"]["idle"], :>, 0.3, "each worker sleeps 2 ms a round"
        # The same process read directly: on Linux, with the pool's run-queue wait (its threads'
        # names reach /proc as their comm).
        live = advise_json("advise", "--pid", io.pid.to_s, "--interval", "0.3", "--cores", "1")
        assert_equal({ "name" => "worker #", "threads" => 3 }, live["measured"]["pool"])
        if File.exist?("/proc/#{io.pid}/task")
          assert_kind_of Integer, live["measured"]["cpu_wait_ns"]
          assert_operator live["measured"]["cpu_wait_ns"], :<=, 3 * 0.3e9 * 2, "at most the pool's time (3 threads)"
        end
      ensure
        Process.kill(:TERM, io.pid)
      end
    end
  end

  # Linux's run-queue wait of the pool's threads (a --pid on this machine), read from
  # /proc/PID/task/TID/{comm,schedstat}: here a made-up tree.
  def test_the_pools_wait_for_a_cpu_core
    Dir.mktmpdir do |proc_root|
      write_task = lambda do |tid, comm, queued_ns|
        dir = File.join(proc_root, "77", "task", tid.to_s)
        FileUtils.mkdir_p(dir)
        File.write(File.join(dir, "comm"), "#{comm}\n")
        File.write(File.join(dir, "schedstat"), "123456 #{queued_ns} 42\n")
      end
      write_task.(77, "ruby", 5 * MS)
      write_task.(78, "puma srv tp 001", 10 * MS)
      write_task.(79, "puma srv tp 002", 20 * MS)
      before = Inputs.cpu_wait_by_name(77, proc_root: proc_root)
      assert_equal({ "ruby" => 5 * MS, "puma srv tp 001" => 10 * MS, "puma srv tp 002" => 20 * MS }, before)
      write_task.(78, "puma srv tp 001", 410 * MS)
      write_task.(79, "puma srv tp 002", 620 * MS)
      write_task.(77, "ruby", 905 * MS)
      after = Inputs.cpu_wait_by_name(77, proc_root: proc_root)
      assert_equal 1_000 * MS, Inputs.pool_schedstat_ns(before, after, ["puma srv tp 001", "puma srv tp 002"])
      # Linux keeps 15 bytes of a name.
      assert_equal 400 * MS, Inputs.pool_schedstat_ns(before, after, ["puma srv tp 001 (extra)"])
      assert_nil Inputs.pool_schedstat_ns(before, after, ["worker 1"]), "no thread has the pool's names"
      assert_nil Inputs.cpu_wait_by_name(99, proc_root: proc_root), "no such process"
      # The first field: time on a CPU (the same 123456 ns written for every thread).
      assert_equal({ "ruby" => 123_456, "puma srv tp 001" => 123_456, "puma srv tp 002" => 123_456 },
                   Inputs.schedstat_by_name(77, :cpu, proc_root: proc_root))
      assert_raises(KeyError) { Inputs.schedstat_by_name(77, :steal, proc_root: proc_root) }

      # 2 threads x 10 s: run 4 s, idle 16 s, 1 s of which waiting for a core (+ charge none).
      hash = pool_snapshot(threads: 2, run: 0.2, wait: 0.0, idle: 0.8)
      workload = Inputs.from_live(Snapshot.from_h(hash), source: "pid 77")
      workload.cpu_wait_ns = 1_000 * MS
      advice = Advisor.new(workload, cores: 1).advice
      expected = Advisor.curve(1.0, 15.0 / 4).find { |p| p.busy >= 0.95 }.threads
      assert_equal expected, advice.threads, "the wait for a core is left out of idle: not IO that threads overlap"
      assert_equal expected, advice.sensitivity[:without_cpu_wait]
      assert_equal expected, Advisor.curve(1.0, 16.0 / 4).find { |p| p.busy >= 0.95 }.threads, "a wait this short changes nothing here"
      assert_nil advice.sensitivity[:runqueue_as_idle]
      assert_match(/the pool waited for a core 5\.0 % of its time \(Linux's run-queue wait\), left out of idle \(.*inside its holds\)\.\z/,
                   advice.what_would_change.grep(/short of CPU/).first)
      assert_match(/waiting for a CPU core \(Linux run-queue wait\): 5\.0 % of the pool's time/,
                   GVLScope::Formats::AdviceText.new(advice).to_s)
    end
  end

  # With the pool's CPU time too, the run-queue wait splits: run beyond the CPU time is a holder
  # set aside by the kernel (out of D), the rest a thread back from IO waiting for a core (out of Z).
  def test_the_cpu_wait_split_by_the_pools_cpu_time
    with = lambda do |cpu_wait_s, cpu_s|
      # 2 threads x 10 s: run 4 s, idle 16 s.
      workload = Inputs.from_live(Snapshot.from_h(pool_snapshot(threads: 2, run: 0.2, wait: 0.0, idle: 0.8)), source: "pid 77")
      workload.cpu_wait_ns = cpu_wait_s * 1_000 * MS
      workload.cpu_ns = cpu_s && cpu_s * 1_000 * MS
      Advisor.new(workload, cores: 1).advice
    end
    fewest = ->(d, z) { Advisor.curve(d, z).find { |p| p.busy >= 0.95 }.threads }
    assert_equal 8, with.(0, nil).threads, "as measured: D 4 s, Z 16 s"
    # 1.5 s of wait, 3 s on a CPU: 1 s of the 4 s held was set aside (D 3 s), 0.5 s of idle (Z 15.5 s).
    split = with.(1.5, 3)
    assert_equal fewest.(3.0, 15.5), split.sensitivity[:without_cpu_wait]
    assert_equal 9, split.sensitivity[:without_cpu_wait]
    assert_equal fewest.(4.0, 15.5), split.threads, "the 0.5 s of it outside the holds is not IO: Z 15.5 s, D as measured"
    assert_equal 8, split.threads
    assert_nil split.sensitivity[:runqueue_as_idle], "the same answer counted as IO: not shown"
    assert_equal 1_000 * MS, split.workload.held_cpu_wait_ns
    assert_match(/waited for a core 7\.5 % of its time \(Linux's run-queue wait\); 5\.0 % of it inside its GVL holds .* the answer would be 9 threads\./,
                 split.what_would_change.join("\n"))
    assert_match(/^  on a CPU core: 15\.0 % of the pool's time \(its GVL run \+ GC: 20\.0 %\)$/,
                 GVLScope::Formats::AdviceText.new(split).to_s)
    assert_equal 3_000 * MS, JSON.parse(GVLScope::Formats::AdviceJSON.new(split).to_s).dig("measured", "cpu_ns")
    # Without the CPU time all of the wait comes out of idle: Z 14.5 s, D 4 s (the least it can be),
    # the answer itself; counted as IO it would be 8.
    assert_equal fewest.(4.0, 14.5), with.(1.5, nil).sensitivity[:without_cpu_wait]
    assert_equal 7, with.(1.5, nil).sensitivity[:without_cpu_wait]
    assert_equal 7, with.(1.5, nil).threads
    assert_equal 8, with.(1.5, nil).sensitivity[:runqueue_as_idle]
    assert_match(/Counted as IO, that wait would make the answer 8 threads\./, with.(1.5, nil).what_would_change.join("\n"))
    # More CPU time than held (syscalls on the pool's threads): nothing inside the holds.
    assert_equal 0, with.(1.5, 5).workload.held_cpu_wait_ns
    assert_equal 7, with.(1.5, 5).sensitivity[:without_cpu_wait]
    # Held beyond CPU time by more than the wait: all of the wait inside the holds (Z unchanged, D 2.5 s).
    assert_equal fewest.(2.5, 16.0), with.(1.5, 1).sensitivity[:without_cpu_wait]
    assert_equal 11, with.(1.5, 1).sensitivity[:without_cpu_wait]
  end

  # --- errors: one line, exit 1 ---

  def test_bad_input_is_one_line_and_exit_1
    Dir.mktmpdir do |dir|
      garbage = File.join(dir, "garbage.json")
      File.write(garbage, "{not json")
      other = File.join(dir, "other.json")
      File.write(other, JSON.generate({ "hello" => 1 }))
      snap = File.join(dir, "snap.json")
      File.write(snap, JSON.generate(pool_snapshot(threads: 2, run: 0.5, wait: 0, idle: 0.5)))
      idle_only = File.join(dir, "idle.json")
      File.write(idle_only, JSON.generate(pool_snapshot(threads: 2, run: 0.0, wait: 0, idle: 1.0)))
      dead = Process.spawn(RbConfig.ruby, "-e", "0")
      Process.wait(dead)
      port = TCPServer.open("127.0.0.1", 0) { |probe| probe.addr[1] } # closed again: nothing listens
      {
        [] => /advise needs one input: a trace FILE, --snapshot FILE, --pid PID or --url URL/,
        [snap, "--snapshot", snap] => /advise takes one input, got FILE and --snapshot/,
        [File.join(dir, "missing.gvl")] => /missing\.gvl: no such file/,
        ["--snapshot", File.join(dir, "missing.json")] => /missing\.json: no such file/,
        ["--snapshot", garbage] => /garbage\.json: not JSON/,
        ["--snapshot", other] => /other\.json: not a gvlscope live snapshot/,
        ["--snapshot", idle_only] => /never held the GVL: nothing to advise from/,
        ["--snapshot", snap, "--threads", "sidekiq"] => /--threads "sidekiq": no thread of snapshot snap\.json matches \(threads: main, puma srv tp 001, puma srv tp 002\)/,
        ["--snapshot", snap, "--threads", "("] => /--threads "\(": not a regular expression/,
        ["--snapshot", snap, "--cores", "0"] => /--cores must be at least 1 \(got 0\)/,
        ["--snapshot", snap, "--processes", "0"] => /--processes must be at least 1/,
        ["--snapshot", snap, "--max-wait-ms", "5"] => /--max-wait-ms needs per-request numbers .* snapshot snap\.json has per-thread numbers only/,
        ["--pid", dead.to_s, "--interval", "0.01"] => /no process #{dead} \(it is not running\)/,
        ["--pid", Process.pid.to_s, "--interval", "0.01"] => /pid #{Process.pid} has no gvlscope live socket/,
        ["--url", "http://127.0.0.1:#{port}/metrics", "--interval", "0.01"] => %r{cannot read http://127\.0\.0\.1:#{port}/metrics},
        ["--pid", "1", "--interval", "0"] => /--interval must be more than 0 seconds/,
      }.each do |args, message|
        out, err, status = gvlscope("advise", *args)
        usage = args.empty? || args.first == snap # no input, or two: bad usage (exit 2)
        assert_equal usage ? 2 : 1, status.exitstatus, "advise #{args.join(' ')}: #{out}#{err}"
        assert_equal 1, err.lines.size, "one line: #{err}"
        assert_match(/\Agvlscope: /, err)
        assert_match message, err
        assert_empty out
      end
    end
  end

  def test_help_names_every_input_and_option
    out, _err, status = gvlscope("advise", "--help")
    assert status.success?
    %w[--snapshot --pid --url --interval --cores --processes --threads --current-threads --max-wait-ms --max-threads --json].each do |option|
      assert_match(/^\s+#{option}\b/, out)
    end
    out, = gvlscope("--help")
    assert_match(/^  advise FILE \| --snapshot FILE/, out)
  end
end
