# frozen_string_literal: true

require "test_helper"
require "support/scripted_timeline"
require "support/reference_timeline"
require "gvlscope/analysis"
require "gvlscope/formats/report_text"
require "gvlscope/formats/report_json"
require "json"
require "stringio"
require "gvlscope/cli"

# What the finding rules read (ThreadStats rows, the Blame) on scripted timelines whose every
# interval is known, so each number is exact.
class FindingsTest < Minitest::Test
  MS = 1_000_000

  # a: wait 0-10, run 10-30, idle 30-40, wait 40-70 (after a blocking call, slow: >= 25 ms),
  #    run 70-80, gc 80-90, run 90-100, idle 100-110, wait 110-115 (after a blocking call, fast),
  #    run 115-200.
  # b: wait 0-30, run 30-70, idle 70-75, wait 75-100 (after a blocking call, slow; a collects
  #    80-90 of it), run 100-110, idle 110-200.
  def two_threads
    ScriptedTimeline.timeline([
      [0, "a", :started], [0, "a", :ready], [0, "b", :started], [0, "b", :ready],
      [10, "a", :resumed], [30, "a", :suspended], [30, "b", :resumed], [40, "a", :ready],
      [70, "b", :suspended], [70, "a", :resumed], [75, "b", :ready], [80, "a", :gc_enter], [90, "a", :gc_exit],
      [100, "a", :suspended], [100, "b", :resumed], [110, "a", :ready], [110, "b", :suspended],
      [115, "a", :resumed]
    ], end_ms: 200)
  end

  def test_rows_carry_what_the_rules_need
    report = GVLScope::Analysis::Report.new(two_threads)
    a, b = report.all_rows
    assert_equal [[115 * MS, 200 * MS], [40 * MS, 70 * MS]], [a.longest_run, a.longest_wait]
    assert_equal [2, 1, 35 * MS, 30 * MS, [40 * MS, 70 * MS]],
                 [a.blocking_waits, a.slow_blocking_waits, a.blocking_wait_ns, a.median_slow_blocking_wait_ns,
                  a.longest_slow_blocking_wait]
    assert_equal 10 * MS, a.median_wait_ns # of 10, 30, 5 ms
    assert_equal 3, a.holds # the GC splits a hold's run, it stays one hold
    assert_equal [1, 1, 25 * MS, 25 * MS, [75 * MS, 100 * MS]],
                 [b.blocking_waits, b.slow_blocking_waits, b.blocking_wait_ns, b.median_slow_blocking_wait_ns,
                  b.longest_slow_blocking_wait]
    assert_equal [30 * MS, 70 * MS], b.longest_run
    assert_equal 25 * MS, report.all_waits_median_ns # of 10, 30, 5, 30, 25 ms
  end

  def test_blame_counts_the_waiting_during_another_threads_gc
    blame = GVLScope::Analysis::Report.new(two_threads).blame
    a, b = 1, 2
    assert_equal({ b => 10 * MS }, blame.during_gc.to_h)
    assert_equal({ a => 25 * MS }, blame.after_blocking[b].to_h) # a held it (running or collecting) all along
    assert_equal({ b => 30 * MS, GVLScope::Analysis::Blame::HAND_OFF => 5 * MS }, blame.after_blocking[a].to_h)
  end

  def test_a_thread_without_runs_or_waits_has_nil_spans_and_zero_medians
    timeline = ScriptedTimeline.timeline([[0, "a", :started], [0, "a", :ready], [0, "a", :resumed],
                                          [5, "a", :suspended], [0, "b", :started]], end_ms: 10)
    b = GVLScope::Analysis::Report.new(timeline).all_rows.last
    assert_equal [nil, nil, nil, 0, 0, 0], [b.longest_run, b.longest_wait, b.longest_slow_blocking_wait, b.median_wait_ns,
                                            b.median_slow_blocking_wait_ns, b.blocking_waits]
  end
end

# Stage 2: the rules on scripted timelines (exact numbers), one finding per cause, ranked by the
# wait each explains.
class FindingRulesTest < Minitest::Test
  MS = 1_000_000
  US = 0.001 # in the scripts' ms

  def report(events, end_ms:)
    GVLScope::Analysis::Report.new(ScriptedTimeline.timeline(events, end_ms: end_ms))
  end

  # +names+ run in turn from +start_ms+, +slices+ timeslices (100 ms) each, preempted at the end of
  # each but their last (they exit then): CPU-bound threads sharing the GVL.
  def take_turns(names, slices, start_ms)
    events = names.flat_map { |name| [[start_ms, name, :started], [start_ms, name, :ready]] }
    (names.size * slices).times do |turn|
      name = names[turn % names.size]
      at = start_ms + 100 * turn
      events << [at, name, :resumed]
      events.concat(turn >= names.size * (slices - 1) ? [[at + 100, name, :exited]] : [[at + 100, name, :suspended], [at + 100, name, :ready]])
    end
    events
  end

  # +threads+ threads in turn, +cycles+ times each: a thread holds the GVL +hold_us+, releases it
  # for a blocking call of 5 us, and the next waiter takes +gap_us+ to be woken and run.
  def hand_offs(threads:, cycles:, hold_us:, gap_us:)
    names = threads.times.map { |n| "reader #{n}" }
    events = names.flat_map { |name| [[0, name, :started], [0, name, :ready]] }
    at = 0.0
    (threads * cycles).times do |turn|
      name = names[turn % threads]
      events << [at, name, :resumed] << [at + hold_us * US, name, :suspended]
      events << [at + (hold_us + 5) * US, name, :ready] unless turn >= threads * (cycles - 1)
      at += (hold_us + gap_us) * US
    end
    [events, at.ceil]
  end

  def test_tiny_holds_handed_over_slowly_are_hand_off_thrash
    events, end_ms = hand_offs(threads: 4, cycles: 200, hold_us: 1, gap_us: 10)
    report = report(events, end_ms: end_ms)
    assert_equal [:hand_off], report.findings.map(&:kind)
    thrash = report.findings.first
    assert_equal ["reader 0", "reader 1", "reader 2", "reader 3"], thrash.about
    # Each wait: 3 holds of 1 us by others and 4 gaps of 10 us in which nobody held the GVL.
    assert_in_delta 1.0 / 11, thrash.evidence[:held_ratio], 0.01
    assert_in_delta 40.0 / 43, thrash.explains_wait_ns.fdiv(report.all_rows.sum(&:wait_ns)), 0.02
    assert_in_delta 38, thrash.evidence[:wait_to_hold_ratio], 2 # a 38 us wait (44 - 1 held - 5 idle) per 1 us hold
    assert_match(/held only 9% of the time: a wait lasted 3\d\.\dx a hold/, thrash.title)
    # The thread count is `gvlscope advise`'s on the same trace: more than the pool's 4 (the GVL is
    # held 9% of the time), so the fix says fewer threads would only cut the wait.
    assert_operator report.advice.threads, :>, 4
    assert_includes thrash.fix, "use fewer threads per process only to cut this wait: `gvlscope advise` on this trace " \
                                "says #{report.advice.threads} (the pool 'reader #' has 4), as fewer would lose throughput; " \
                                "batch small blocking calls"
  end

  def test_no_hand_off_thrash_when_the_gvl_is_mostly_held_or_hand_offs_are_few
    events, end_ms = hand_offs(threads: 4, cycles: 200, hold_us: 40, gap_us: 10) # held 80%
    assert_empty report(events, end_ms: end_ms).findings.select { |f| f.kind == :hand_off }
    events, end_ms = hand_offs(threads: 4, cycles: 20, hold_us: 1, gap_us: 10) # 20 waits a thread
    assert_empty report(events, end_ms: end_ms).findings.select { |f| f.kind == :hand_off }
  end

  def test_cpu_bound_threads_taking_turns_are_one_finding_per_group
    # 2 threads, then 3 others: two causes (they never waited for each other), not five hogs.
    report = report(take_turns(%w[a b], 3, 0) + take_turns(%w[c d e], 3, 600), end_ms: 1500)
    hogs = report.findings.select { |f| f.kind == :hog }
    assert_equal [%w[c d e], %w[a b]], hogs.map(&:about) # the one explaining more wait first
    three, two = hogs
    assert_match(/\AHog: 3 CPU-bound threads share one GVL \('c', 'd', 'e'\): they gave up the GVL at the end of their timeslice 6 of 6 times/, three.title)
    # Waits between turns, all while another of the group held the GVL: c 200 + 200, d 100 + 200 +
    # 200, e 200 + 200 + 200; a 100 + 100, b 100 + 100 + 100.
    assert_equal 1500 * MS, three.explains_wait_ns
    assert_equal 500 * MS, two.explains_wait_ns
    assert_equal [0.75, 0.25], [three.wait_share, two.wait_share]
    assert_equal report.all_rows.sum(&:wait_ns), two.explains_wait_ns + three.explains_wait_ns # all wait was theirs
  end

  def test_the_text_shows_the_top_five_findings_and_json_all
    events = 6.times.flat_map { |phase| take_turns(["p#{phase}a", "p#{phase}b"], 3, 600 * phase) }
    report = report(events, end_ms: 3600)
    assert_equal 6, report.findings.size
    assert(report.findings.all? { |f| f.explains_wait_ns == 500 * MS && f.wait_share == 0.1667 })
    text = GVLScope::Formats::ReportText.new(report).to_s
    assert_includes text, "Findings (6), by the GVL wait each explains:\n1. [500 ms, 17% of all wait] Hog: 2 CPU-bound threads"
    assert_equal 5, text.scan(/^\d\. \[500 ms, 17% of all wait\] Hog/).size
    assert_includes text, "(1 more finding: gvlscope report --json lists them all)"
    json = JSON.parse(GVLScope::Formats::ReportJSON.new(report).to_s)
    assert_equal [500 * MS] * 6, json["findings"].map { |f| f["explains_wait_ns"] }
    assert_equal %w[about evidence explains_wait_ns fix focus_ns kind thread threads title wait_share],
                 json["findings"].first.keys.sort
  end

  # A pool thread serves a request: it holds the GVL from 0, pauses for a lock at 40 ms
  # (+pause_ms+ long) and holds it again until 130 (then idles): never preempted, so no hog.
  # 'srv' wants the GVL from 0 and gets it at 130, once: no convoy.
  def request_beside_a_waiter(pause_ms: 1)
    [[0, "tp 1", :started], [0, "tp 1", :ready], [0, "tp 1", :resumed], [40, "tp 1", :suspended],
     [40 + pause_ms, "tp 1", :ready], [40 + pause_ms, "tp 1", :resumed], [130, "tp 1", :suspended],
     [0, "srv", :started], [0, "srv", :ready], [130, "srv", :resumed], [135, "srv", :suspended]]
  end

  def test_a_request_that_held_the_gvl_a_timeslice_while_others_waited_is_a_long_hold
    report = report(request_beside_a_waiter, end_ms: 400)
    assert_equal [:long_hold], report.findings.map(&:kind)
    hold = report.findings.first
    assert_equal ["tp 1"], hold.about
    assert_equal 129 * MS, hold.explains_wait_ns # srv waited 0-130 ms, all but the 1 ms pause while tp 1 held the GVL
    assert_equal [0, 130 * MS], hold.focus_ns
    assert_equal({ long_streaks: 1, long_streak_held_ns: 129 * MS, longest_streak_held_ns: 129 * MS, longest_streak_ns: 130 * MS },
                 hold.evidence.slice(:long_streaks, :long_streak_held_ns, :longest_streak_held_ns, :longest_streak_ns))
    assert_equal "Long hold: a request or job held the GVL 129 ms in one stretch (130 ms from its first hold to its last, " \
                 "on 'tp 1'; no other such stretch) while 1 other thread waited 129 ms for it ('srv' 129 ms)", hold.title
  end

  # A pause of a quarter timeslice (25 ms) ends a stretch: 40 ms held, then 65 ms, neither a timeslice
  # (with a 24 ms pause: one of 40 + 66 ms).
  def test_a_pause_of_a_quarter_timeslice_ends_the_stretch
    report = report(request_beside_a_waiter(pause_ms: 25), end_ms: 400)
    assert_equal [0, 0], report.all_rows.map(&:long_streaks)
    assert_empty report.findings
    assert_equal [:long_hold], report(request_beside_a_waiter(pause_ms: 24), end_ms: 400).findings.map(&:kind)
  end

  # A job preempted twice of its three releases is CPU-bound, but it held the GVL in one stretch
  # that ended in a pause (its thread went back to waiting for work): a long hold, not a hog.
  # A thread that ran until its exit stays a hog (test_cpu_bound_threads_taking_turns_...).
  def cpu_bound_stretch(name)
    [[0, name, :started], [0, name, :ready], [0, name, :resumed], [100, name, :suspended], [100, name, :ready],
     [0, "srv", :started], [0, "srv", :ready], [100, "srv", :resumed], [101, "srv", :suspended],
     [101, "srv", :ready], [101, name, :resumed], [200, name, :suspended], [200, name, :ready],
     [200, "srv", :resumed], [201, "srv", :suspended], [201, name, :resumed], [230, name, :suspended]]
  end

  def test_a_cpu_bound_job_that_ends_in_a_pause_is_a_long_hold_not_a_hog
    report = report(cpu_bound_stretch("processor 1"), end_ms: 400)
    job = report.all_rows.first
    assert_equal [2, 3], [job.released_by[:preempted], job.released_by.values.sum] # CPU-bound
    assert_equal [:long_hold], report.findings.map(&:kind)
    assert_equal 199 * MS, report.findings.first.explains_wait_ns
  end

  # The same stretch on a thread that serves no requests (the main thread booting an app, a
  # script's one thread: not a numbered worker nor one of several of a name) is a hog: "a request
  # or job" would point at requests that are not there.
  def test_a_stretch_outside_a_worker_thread_is_a_hog_not_a_long_hold
    %w[main pricer].each do |name|
      findings = report(cpu_bound_stretch(name), end_ms: 400).findings
      assert_equal [:hog], findings.map(&:kind), name
      assert_match(/\AHog: '#{name}' gave up the GVL at the end of its timeslice 2 of 3 times/, findings.first.title)
    end
  end

  # The engine (Model::Scan) sums the same stretches from the same events as the plain Ruby
  # reference (test/support/reference_timeline.rb).
  def test_the_engine_counts_the_same_stretches
    [1, 24, 25].each do |pause_ms|
      events = request_beside_a_waiter(pause_ms: pause_ms)
      reference = ReferenceReport.new(ReferenceTimeline.new(ScriptedTimeline.file(events, end_ms: 400)))
      scan = GVLScope::Model::Scan.new(ScriptedTimeline.file(events, end_ms: 400)).run
      assert_equal reference.all_rows.map(&:to_h), GVLScope::Analysis::Report.new(scan).all_rows.map(&:to_h), "pause #{pause_ms} ms"
    end
  end

  def test_gc_that_others_waited_for_is_a_finding
    # 'allocator' collects 10-40 and 50-60 while 'worker' waits 0-70 for the GVL.
    events = [[0, "allocator", :started], [0, "allocator", :ready], [0, "worker", :started], [0, "worker", :ready],
              [0, "allocator", :resumed], [10, "allocator", :gc_enter], [40, "allocator", :gc_exit],
              [50, "allocator", :gc_enter], [60, "allocator", :gc_exit], [70, "allocator", :suspended],
              [70, "worker", :resumed]]
    report = report(events, end_ms: 100)
    gc = report.findings.find { |f| f.kind == :gc }
    assert gc, report.findings.map(&:title).inspect
    assert_equal %w[allocator], gc.about
    assert_equal %w[allocator worker], gc.threads
    assert_equal 40 * MS, gc.explains_wait_ns
    assert_in_delta 40.0 / 70, gc.wait_share, 0.0001
    assert_equal [10 * MS, 40 * MS], gc.focus_ns
    assert_equal({ gc_ns: 40 * MS, gc_share: 0.4, collectors: { "allocator" => 40 * MS },
                   waited_during_gc: { "worker" => 40 * MS } }, gc.evidence)
    assert_match(/\AGC: garbage collection held the GVL 40% of the time \(40 ms\), stopping every other thread; 'allocator' ran 100% of it/, gc.title)
  end

  def test_no_gc_finding_for_short_collections_or_when_nobody_waited
    short = [[0, "a", :started], [0, "a", :ready], [0, "b", :started], [0, "b", :ready], [0, "a", :resumed],
             [10, "a", :gc_enter], [15, "a", :gc_exit], [70, "a", :suspended], [70, "b", :resumed]]
    assert_empty report(short, end_ms: 100).findings.select { |f| f.kind == :gc } # 5% of the time
    alone = [[0, "a", :started], [0, "a", :ready], [0, "a", :resumed], [10, "a", :gc_enter], [60, "a", :gc_exit]]
    assert_empty report(alone, end_ms: 100).findings.select { |f| f.kind == :gc } # nobody waited
  end
end

# Recorded server traces (test/fixtures/traces/servers/record.rb): Puma serving a 300 ms route
# beside quick requests, Sidekiq running 400 ms jobs beside quick ones. Their pool threads are
# preempted in under half their releases and their victims wait a few times each, yet the report
# must lead with the request or job that held the GVL, naming its code; the engine and the plain
# Ruby reference give the same findings.
class ServerTraceFindingsTest < Minitest::Test
  TRACES = File.join(GVLScopeTestHelper::ROOT, "test/fixtures/traces")

  def assert_leads_with_long_hold(name, label, file, line)
    path = File.join(TRACES, name)
    timeline, scan = [ReferenceReport.new(ReferenceTimeline.open(path)), GVLScope::Analysis::Report.new(GVLScope::Model::Scan.open(path))]
                     .map { |report| report.findings.first }
    assert_equal timeline.to_h, scan.to_h
    assert_equal :long_hold, timeline.kind, timeline.title
    frame = timeline.evidence[:holder_frames].first
    assert_match label, frame[:label]
    assert_equal [file, line], [File.basename(frame[:path]), frame[:line]]
    assert_includes timeline.title, "#{File.basename(frame[:path])}:#{line})"
    assert_operator timeline.evidence[:others_waited_ns], :>=, 100_000_000 # a timeslice or more
  end

  def test_a_puma_request_that_burns_cpu_leads_the_findings
    # (a method defined in config.ru is a singleton method of Rack's builder: labelled as its class's)
    assert_leads_with_long_hold("puma.gvl", /\ARack::Builder#burn\z/, "config.ru", 8)
  end

  def test_a_sidekiq_job_that_burns_cpu_leads_the_findings
    assert_leads_with_long_hold("sidekiq.gvl", /\AInvoicePdfJob#perform\z/, "jobs.rb", 15)
  end
end

# One answer: the thread count a report's fix names is the one `gvlscope advise` prints for the
# same trace (test/fixtures/traces/thrash.gvl: a hand-off thrash).
class OneAnswerTest < Minitest::Test
  def cli(*args)
    out = StringIO.new
    err = StringIO.new
    assert_equal 0, GVLScope::CLI.new(out: out, err: err).run(args), err.string
    out.string
  end

  def test_the_reports_fix_quotes_the_advisors_thread_count
    trace = File.join(GVLScopeTestHelper::ROOT, "test/fixtures/traces/thrash.gvl")
    advised = Integer(cli("advise", trace)[/\Agvlscope advise: (\d+) threads per process/, 1])
    assert_includes cli("report", trace), "`gvlscope advise` on this trace says #{advised} ("
  end
end
