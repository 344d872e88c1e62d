# frozen_string_literal: true

require_relative "../test_helper"
require "json"
require "stringio"
require "tmpdir"
require "gvlscope/cli"
require "gvlscope/analysis/diff_inputs"

# `gvlscope diff A B` on recorded pairs (test/fixtures/diff): the convoy demo's traces before and
# after its CPU work moved to a process (demo/convoy.rb, CPU_IN=process), and the snapshot and
# scrape pairs of record.rb there (a Rack app beside a CPU thread, then beside a CPU process).
class DiffTest < Minitest::Test
  include GVLScopeTestHelper
  FIXTURES = File.join(GVLScopeTestHelper::ROOT, "test/fixtures/diff")
  PAIRS = {
    trace: %w[convoy-before.gvl convoy-after.gvl],
    snapshot: %w[before.snapshots.json after.snapshots.json],
    scrape: %w[before.prom after.prom],
  }.freeze
  Diff = GVLScope::Analysis::Diff

  def cli(*args) = gvlscope_in_process(*args)

  def pair(kind) = PAIRS.fetch(kind).map { |name| File.join(FIXTURES, name) }

  def diff_of(kind)
    out, err, status = cli("diff", *pair(kind))
    assert_equal 0, status, err
    assert_empty err
    out
  end

  def verdict_line(out) = out.lines.find { |line| line.start_with?("Verdict: ", "No verdict: ") }.chomp

  def test_traces_convoy_fixed
    out = diff_of(:trace)
    assert_equal "Verdict: GVL wait per second fell 96 % (A 1888 ms/s → B 71 ms/s; 221 → 177 waits); " \
                 "GVL held 99.7 % → 8.5 %; findings gone: hog, convoy", verdict_line(out)
    # Threads by name and creation site: the two echo threads (serials differ) are one row, and
    # 'cpu' is gone.
    assert_match(/^  echo x2 \(demo\/convoy\.rb:13\)\s+913 ms → 56 ms fell 94 %/, out)
    assert_match(/^  cpu \(demo\/convoy\.rb:32\)\s+2\.13 ms → \(gone\)/, out)
    assert_match(/^  gone:    hog 'cpu' \[13893 ms\]$/, out)
    assert_match(/^  gone:    convoy 'main', 'echo' \[13695 ms\]$/, out)
    # 92 and 93 waits of 'main': no p99 verdict (MIN_P99 = 100), said so.
    assert_match(/^  main: p99 wait: 92 and 93 values \(a p99 needs 100 on each side\)$/, out)
  end

  def test_snapshots_per_route_with_p99
    out = diff_of(:snapshot)
    assert_equal "Verdict: GVL wait per request fell 99.8 % (A 149 ms → B 257 us; 480 → 480 requests); " \
                 "GVL held 98.9 % → 13.1 %; findings gone: hog, convoy", verdict_line(out)
    assert_match(%r{^  GET /fast\s+149 ms → 507 us fell 99\.7 %\s+240 → 240\s+≤537 ms → ≤33\.6 ms fell 94 %$}, out)
    assert_match(/^  worker 0\s+957 ms → 25 ms fell 97 %/, out)
    assert_match(/^  main: GVL wait per s: 2 and 3 waits \(a verdict needs 30 on one side\)$/, out)
  end

  def test_scrapes_per_route_with_p99
    out = diff_of(:scrape)
    assert_equal "Verdict: GVL wait per request fell 99.8 % (A 149 ms → B 257 us; 480 → 480 requests); " \
                 "GVL held 98.8 % → 14.0 %", verdict_line(out)
    assert_match(%r{^  GET /slow\s+149 ms → 7\.51 us fell >99\.9 %\s+240 → 240\s+≤537 ms → ≤524 us fell 99\.9 %$}, out)
  end

  # A snapshot's series keep each request's GVL wait in log2 buckets (the p99 per route), through
  # JSON and a difference; a file without them (an older gvlscope) still reads, without a p99.
  def test_snapshot_series_keep_wait_buckets
    snapshot = lambda do |time_ns, count, buckets|
      GVLScope::Live::Snapshot.new(source: "socket", pid: 7, time_ns: time_ns, wall_ns: time_ns, held_ns: 0, wait_ns: 0,
                                   breakdown: [{ kind: "route", label: "GET /", tags: {}, count: count, wait_ns: 0, wait_buckets: buckets }])
    end
    earlier = snapshot.(1_000, 10, [0, 0, 4, 6])
    later = snapshot.(2_000, 25, [0, 0, 9, 16])
    copy = GVLScope::Live::Snapshot.from_json(later.to_json)
    assert_equal [0, 0, 9, 16], copy.breakdown.first[:wait_buckets].first(4)
    assert_equal [0, 0, 9, 16], JSON.parse(later.to_json)["breakdown"].first["wait_buckets"]
    assert_equal [0, 0, 5, 10], (copy - earlier).breakdown.first[:wait_buckets].first(4)
    older = JSON.parse(later.to_json).tap { |h| h["breakdown"].first.delete("wait_buckets") }
    assert_nil GVLScope::Live::Snapshot.from_h(older).breakdown.first[:wait_buckets]
    refute JSON.parse(GVLScope::Live::Snapshot.from_h(older).to_json)["breakdown"].first.key?("wait_buckets")
    error = assert_raises(GVLScope::Error) do
      GVLScope::Live::Snapshot.from_h(JSON.parse(later.to_json).tap { |h| h["breakdown"].first["wait_buckets"] = [1, -2] })
    end
    assert_match(/breakdown\[0\]\.wait_buckets\.1 is -2/, error.message)
  end

  def test_json_round_trips
    PAIRS.each_key do |kind|
      json, err, status = cli("diff", *pair(kind), "--format", "json")
      assert_equal 0, status, err
      hash = JSON.parse(json)
      assert_equal 1, hash["gvlscope_diff"]
      assert_equal kind.to_s, hash["kind"]
      assert hash["verdict_given"], kind
      back = Diff.from_h(hash)
      assert_equal hash, JSON.parse(JSON.generate(back.to_h)), kind
      assert_equal diff_of(kind), GVLScope::Formats::DiffText.new(back).to_s, kind
    end
    assert_equal cli("diff", *pair(:trace), "--format", "json")[0], cli("diff", *pair(:trace), "--json")[0]
  end

  def side(waits:, wall_ns: 1_000_000_000, wait_ns: 10_000_000, threads: [], series: [])
    Diff::Side.new(kind: "snapshot", path: "x.json", wall_ns: wall_ns, wait_ns: wait_ns, held_ns: wall_ns / 2, waits: waits,
                   wait_histogram: Array.new(64, 0).tap { |h| h[20] = waits }, threads: threads, series: series, findings: [])
  end

  # docs/diff.md's commands, end to end: the convoy demo traced as it is and with CPU_IN=process,
  # then diffed (5 round trips: about 1.5 s beside the CPU thread).
  def test_convoy_demo_fixed_end_to_end
    Dir.mktmpdir("gvlscope-diff") do |dir|
      demo = File.join(GVLScopeTestHelper::ROOT, "demo/convoy.rb")
      { "before" => {}, "after" => { "CPU_IN" => "process" } }.each do |name, env|
        command = [RbConfig.ruby, File.join(GVLScopeTestHelper::ROOT, "exe/gvlscope"), "run", "--no-report",
                   "-o", File.join(dir, "#{name}.gvl"), "--", RbConfig.ruby, demo]
        _, err, status = run_process(command, env: { "ROUND_TRIPS" => "5", **env }, chdir: dir, timeout: 60)
        assert status.success?, err
      end
      assert_equal 1, Dir[File.join(dir, "after-*.gvl")].size, "the forked CPU process writes its own trace"
      out, err, status = cli("diff", File.join(dir, "before.gvl"), File.join(dir, "after.gvl"))
      assert_equal 0, status, err
      assert_match(/\AVerdict: GVL wait per second fell \d+(\.\d)? % .*; findings gone: (hog, convoy|convoy, hog)\b/, verdict_line(out))
      assert_match(/^  cpu \(.*demo\/convoy\.rb:32\)\s+\S+ ms → \(gone\)/, out)
    end
  end

  def test_not_enough_data_is_no_verdict
    diff = Diff.new(side(waits: 12), side(waits: 29, wait_ns: 2_000_000))
    refute diff.verdict?
    assert_equal "not enough data for a verdict on GVL wait per second: 12 and 29 waits (a verdict needs 30 on one side) " \
                 "(A 10 ms/s → B 2.00 ms/s); GVL held 50.0 % → 50.0 %", diff.verdict
    out = GVLScope::Formats::DiffText.new(diff).to_s
    assert_includes out, "No verdict: not enough data"
    assert_includes out, "process: p99 wait: 12 and 29 values (a p99 needs 100 on each side)"

    enough = Diff.new(side(waits: 12), side(waits: 30, wait_ns: 9_500_000))
    assert enough.verdict?
    assert_match(/\AGVL wait per second about the same \(A 10 ms\/s → B 9\.50 ms\/s/, enough.verdict)
  end

  def test_requests_need_enough_on_each_side
    route = ->(count, wait_ns) { Diff::Series.new(kind: "route", label: "GET /", tags: {}, count: count, wait_ns: wait_ns, duration_ns: 0) }
    diff = Diff.new(side(waits: 100, series: [route.(29, 29_000_000)]), side(waits: 100, series: [route.(500, 100_000_000)]))
    assert_match(/\Anot enough data for a verdict on GVL wait per request: 29 and 500 counted/, diff.verdict)
    diff = Diff.new(side(waits: 100, series: [route.(30, 30_000_000)]), side(waits: 100, series: [route.(500, 100_000_000)]))
    assert_match(/\AGVL wait per request fell 80 % \(A 1 ms → B 200 us; 30 → 500 requests\)/, diff.verdict)
  end

  # Findings in both inputs are compared per second of each: the convoy demo traced twice, for
  # 7.4 s and 2.4 s, has the same hog and convoy.
  def test_findings_kept_and_changed
    out, err, status = cli("diff", File.join(FIXTURES, "convoy-before.gvl"), File.join(GVLScopeTestHelper::ROOT, "test/fixtures/traces/convoy.gvl"))
    assert_equal 0, status, err
    assert_match(/^  kept:    hog 'cpu' \[4533 ms\]$/, out)
    assert_match(/^  echo x2 \(demo\/convoy\.rb:13 → \?\)\s+913 ms → 915 ms same/, out) # that trace has no sites
    finding = ->(ns) { Diff::FindingRow.new(kind: "hog", about: ["cpu"], threads: ["cpu"], title: "", explains_wait_ns: ns) }
    a = side(waits: 100).tap { |s| s.findings = [finding.(500_000_000)] }
    b = side(waits: 100, wall_ns: 2_000_000_000).tap { |s| s.findings = [finding.(500_000_000)] }
    diff = Diff.new(a, b)
    assert_equal 1, diff.findings["changed"].size
    assert_includes GVLScope::Formats::DiffText.new(diff).to_s, "  changed: hog 'cpu' [500 ms] (explains 500 ms/s → 250 ms/s of GVL wait)"
  end

  def test_jobs_when_there_are_no_routes
    job = ->(queue, count, wait_ns) { Diff::Series.new(kind: "job", label: "HardJob", tags: { "queue" => queue }, count: count, wait_ns: wait_ns, duration_ns: 0) }
    diff = Diff.new(side(waits: 100, series: [job.("default", 40, 400_000_000), job.("low", 5, 0)]),
                    side(waits: 100, series: [job.("default", 50, 150_000_000), job.("high", 1, 0)]))
    assert_match(/\AGVL wait per job run fell 67 % \(A 8\.89 ms → B 2\.94 ms; 45 → 51 job runs\)/, diff.verdict)
    assert_equal [["HardJob (queue=default)", "both"], ["HardJob (queue=low)", "gone"], ["HardJob (queue=high)", "new"]],
                 diff.jobs.map { |item| [item.name, item.status] }
    assert_empty diff.routes
    text = GVLScope::Formats::DiffText.new(diff).to_s
    assert_match(/^jobs\n  job\s+wait per request, A → B/, text)
    assert_match(/^  HardJob \(queue=low\)\s+0 us → \(gone\)/, text)
  end

  def test_threads_match_by_name_not_serial
    group = ->(name, wait_ns) { Diff::Group.new(name: name, created_at: "app.rb:3", threads: 1, wait_ns: wait_ns, held_ns: 0, waits: 50) }
    diff = Diff.new(side(waits: 100, threads: [group.("a", 100), group.("b", 200)]),
                    side(waits: 100, threads: [group.("b", 100), group.("c", 50)]))
    assert_equal [["a (app.rb:3)", "gone"], ["b (app.rb:3)", "both"], ["c (app.rb:3)", "new"]], diff.threads.map { |t| [t.name, t.status] }
    assert_equal :fell, diff.threads[1].measure(:wait_per_s).change
    # A site that moved (or that one input lacks) still matches by name when the name is left once on each side.
    moved = ->(name, site) { Diff::Group.new(name: name, created_at: site, threads: 1, wait_ns: 100, held_ns: 0, waits: 50) }
    diff = Diff.new(side(waits: 100, threads: [moved.("a", "app.rb:3"), moved.("pool", "app.rb:9"), moved.("pool", "app.rb:10")]),
                    side(waits: 100, threads: [moved.("a", "app.rb:5"), moved.("pool", nil)]))
    assert_equal [["a (app.rb:3 → app.rb:5)", "both"], ["pool (app.rb:9)", "gone"], ["pool (app.rb:10)", "gone"], ["pool", "new"]],
                 diff.threads.map { |t| [t.name, t.status] }
    assert_equal "thread", GVLScope::Analysis::DiffInputs.base_name("thread 7 (app.rb:3)")
    assert_equal "echo", GVLScope::Analysis::DiffInputs.base_name("echo #4")
  end

  def assert_one_line_error(args, pattern, status: 1)
    out, err, code = cli(*args)
    assert_equal status, code, err
    assert_empty out
    assert_equal 1, err.lines.size, err
    assert_match pattern, err
    refute_match(/\.rb:\d+:in /, err)
  end

  def test_bad_input_is_one_line
    trace, = pair(:trace)
    snapshot, = pair(:snapshot)
    scrape, = pair(:scrape)
    assert_one_line_error(["diff", trace, snapshot], /is a trace and .* a live snapshot file: diff compares two of a kind/)
    assert_one_line_error(["diff", scrape, trace], /is a \/metrics scrape and .* a trace: diff compares two of a kind/)
    assert_one_line_error(["diff", trace, "/nonexistent/b.gvl"], %r{\Agvlscope: /nonexistent/b\.gvl: no such file$})
    assert_one_line_error(["diff", trace, FIXTURES], /is a directory/)
    assert_one_line_error(["diff", trace], /diff takes two inputs, A and B \(got 1\) \(see gvlscope diff --help\)/, status: 2)
    assert_one_line_error(["diff", trace, trace, "--format", "html"], /invalid argument: --format html/, status: 2)
    Dir.mktmpdir do |dir|
      garbage = File.join(dir, "garbage.gvl")
      File.binwrite(garbage, "\x01\x02not a trace at all")
      assert_one_line_error(["diff", trace, garbage], /garbage\.gvl: not a gvlscope trace/)
      broken = File.join(dir, "broken.json")
      File.write(broken, File.read(snapshot).sub('"wall_ns":', '"wall_ns":"x","was":'))
      assert_one_line_error(["diff", snapshot, broken], /broken\.json: not a gvlscope live snapshot: wall_ns is "x"/)
      empty = File.join(dir, "empty.prom")
      File.write(empty, "# HELP gvlscope_nothing\ngvlscope_other_total 3\n")
      assert_one_line_error(["diff", scrape, empty], /empty\.prom: no gvlscope metrics in the answer/)
    end
  end

  # docs/diff.md shows today's output of the three pairs, byte for byte.
  def test_docs_show_todays_output
    doc = File.read(File.join(GVLScopeTestHelper::ROOT, "docs/diff.md"))
    PAIRS.each_key do |kind|
      paths = PAIRS.fetch(kind).map { |name| "test/fixtures/diff/#{name}" }
      out, err, = Dir.chdir(GVLScopeTestHelper::ROOT) { cli("diff", *paths) }
      assert_empty err
      assert_includes doc, "$ gvlscope diff #{paths.join(' ')}\n#{out}```", "docs/diff.md: the #{kind} pair's output changed"
    end
    few = Diff.new(side(waits: 12), side(waits: 29, wait_ns: 2_000_000))
    assert_includes doc, "No verdict: #{few.verdict}\n"
  end

  # Broken inputs of each kind, mutated at random (a value, a line cut, bytes): every one is a diff
  # or one line, never a backtrace.
  def test_mutated_inputs_are_a_diff_or_one_line
    random = Random.new(31)
    odd = %w[-1 1e400 NaN x "" {} [] 1e300 0 -0.5 +Inf]
    Dir.mktmpdir do |dir|
      PAIRS.each do |kind, (name, other)|
        text = File.binread(File.join(FIXTURES, name))
        40.times do |n|
          mutated = text.dup
          case n % 3
          when 0 then mutated[random.rand(mutated.bytesize), 0] = odd.sample(random: random).b
          when 1 then mutated = mutated.byteslice(0, random.rand(mutated.bytesize))
          else 3.times { mutated.setbyte(random.rand(mutated.bytesize), random.rand(256)) }
          end
          path = File.join(dir, "#{n}-#{name}")
          File.binwrite(path, mutated)
          out, err, status = cli("diff", path, File.join(FIXTURES, other))
          assert_includes [0, 1], status, "#{kind} #{n}: #{err}"
          if status.zero?
            assert_match(/^(Verdict|No verdict): /, out)
          else
            assert_equal 1, err.lines.size, "#{kind} #{n}: #{err}"
            refute_match(/internal error|\.rb:\d+:in /, err, "#{kind} #{n}")
          end
        end
      end
    end
  end

  def test_help
    out, _, status = cli("diff", "--help")
    assert_equal 0, status
    assert_includes out, "Usage: gvlscope diff A B"
    assert_includes out, "--format"
    assert_includes cli("--help")[0], "diff A B"
  end

  # Each Ractor has a GVL of its own: the recorded Ractor trace held them 3 %, 98 % and 97 % of the
  # time. Every command shows a held share of one GVL (the busiest's, as the report's headline),
  # never their sum (198 %): no percentage it prints passes 100.
  def test_no_command_prints_a_share_above_100_percent
    trace = File.join(ROOT, "test/fixtures/traces/ractor.gvl")
    [["summary", trace], ["report", trace], ["diff", trace, trace], ["advise", trace]].each do |args|
      out, err, status = gvlscope(*args)
      assert status.success?, err
      shares = out.scan(/(\d+(?:\.\d+)?) ?%/).map { |(number)| number.to_f }
      refute_empty shares, args.first
      assert_operator shares.max, :<=, 100, "#{args.first}: #{out}"
    end
  end

  # The live API's text (Metrics::Snapshot#to_s) says the same of two Ractors each holding its GVL
  # 90 % of a second: 90 %, not 180 %.
  def test_metrics_text_shows_a_share_of_one_gvl
    require "gvlscope/recorder/metrics"
    require "gvlscope/formats/metrics_text"
    metrics = GVLScope::Metrics
    row = ->(serial, ractor, run) { metrics::ThreadRow.new("r#{serial}", serial, ractor, :run, false, *metrics::COUNTERS.map { |c| c == :run_ns ? run : 0 }) }
    snapshot = metrics::Snapshot.new(taken_ns: 1, wall_ns: 1_000_000_000, waiting_threads_by_ractor: {},
                                     threads: [row.(1, 1, 900_000_000), row.(2, 2, 900_000_000)], exited: row.(0, nil, 0),
                                     histograms: Array.new(3) { Array.new(64, 0) })
    assert_equal "GVL held 90.0% of 1.000 s wall (Ractor 1: 90.0%, Ractor 2: 90.0%); 0 acquisitions; total wait 0.0 ms; " \
                 "0 threads waiting now", GVLScope::Formats::MetricsText.new(snapshot).to_s.lines.first.chomp
  end
end

