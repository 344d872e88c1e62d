# frozen_string_literal: true

require "test_helper"
require "json"
require "tmpdir"
require "gvlscope/model"
require "gvlscope/analysis"
require "gvlscope/cli"
require "gvlscope/formats/perfetto"
require "open3"
require_relative "../../lab/tiny_scheduler"

# Event loops in a trace (format version 4): fibers.c's switch hook writes each turn's records in
# the loop thread's lane, and the report names the code of a fiber that kept the loop.
class EventLoopTraceTest < Minitest::Test
  include GVLScopeTestHelper

  MS = 1_000_000
  BURN_LINE = __LINE__ + 8 # hold_the_loop's loop
  GIVE_BACK_LINE = __LINE__ + 8 # hold_the_loop's `sleep 0`

  # Keeps the loop for +ms+ of the thread's own CPU time (at least that much wall time, however
  # loaded the machine), then gives it back to the loop.
  def hold_the_loop(ms)
    deadline = Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) + ms / 1000.0
    x = 0
    x += 1 while Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) < deadline
    sleep 0 # gives the loop back
  end

  def teardown
    GVLScope.stop if GVLScope.tracing?
    GVLScope::EventLoops.track(false)
  end

  # A loop thread with three tasks A, B, C that each sleep 0 at once (one turn each), then the
  # loop resumes them in that order: A keeps the loop 40 ms and gives it back in hold_the_loop,
  # B and C (ready all along) end; then A's last turn. Returns the Model::TraceFile and the path.
  # +beside+: a thread that runs Ruby code meanwhile (it waits for the GVL while the loop's thread
  # holds it: the holder sampler runs).
  def record_a_loop(dir, stacks: true, beside: false)
    path = File.join(dir, "loop.gvl")
    # A name of its own: an earlier recording's loop thread may still be in the registry (a namesake).
    loop_name = "event loop #{dir.hash.abs}"
    GVLScope.start(path, fibers: true, stacks: stacks)
    stop = false
    competitor = Thread.new { nil until stop } if beside
    thread = Thread.new do
      Thread.current.name = loop_name
      Fiber.set_scheduler(TinyScheduler.new)
      Fiber.schedule do
        sleep 0
        hold_the_loop(40)
      end
      2.times { Fiber.schedule { sleep 0 } }
    end
    thread.join
    stop = true
    competitor&.join
    summary = GVLScope.stop
    assert_equal 0, summary.dropped
    file = GVLScope::Model::TraceFile.read(path)
    # Every record the recorder counted is read: the events, and the ARG, SAMPLE and turn records.
    assert_equal summary.events, file.records
    # By its name: other threads created in this file (an earlier test's, the competitor) may be in the trace.
    [file, path, file.thread_info.each_value.find { |info| info.name == loop_name }.serial, loop_name]
  end

  def test_each_turn_is_recorded_in_the_loops_lane_in_order
    Dir.mktmpdir do |dir|
      file, path, loop_thread = record_a_loop(dir)
      turns = file.raw_turns
      assert_equal [loop_thread], turns.map { |_, thread, _, _| thread }.uniq, "only the loop's thread takes turns"
      kinds = turns.map { |_, _, kind, _| kind }
      # The first three turns begin the tasks; each later one resumes a fiber whose `sleep 0` was
      # over at once (TURN_READY: how long it had been ready), the last after its site. The
      # scheduler is wrapped (to tell readiness) by a postponed job the loop's first turn in the
      # trace asks for: A's first `sleep 0` may come before it, and A's next turn have none.
      later = %i[turn_begin turn_ready turn_end] * 2 + %i[turn_begin turn_site turn_ready turn_end]
      assert_includes [%i[turn_begin turn_end] * 3 + %i[turn_begin turn_ready turn_end] + later,
                       %i[turn_begin turn_end] * 4 + later], kinds
      ready_us = turns.select { |_, _, kind, _| kind == :turn_ready }.map(&:last)
      assert_operator ready_us[-3], :>=, 40_000 * 0.99, "B was ready through A's 40 ms of CPU clock"
      assert_operator ready_us[-2], :>=, 40_000 * 0.99, "C too"
      a, b, c = turns.select { |_, _, kind, _| kind == :turn_begin }.map(&:last).first(3)
      assert_equal [a, b, c, a, b, c, a], turns.select { |_, _, kind, _| kind == :turn_begin }.map(&:last)
      assert_equal [a + 1, a + 2], [b, c], "serials in order of first turn"
      # The engine's first pass finds the same records.
      scan = GVLScope::Model.timeline(path)
      assert_equal file.records, scan.file.records
      assert_equal [a, b, c, a, b, c, a], scan.turns.map(&:fiber)
      long = scan.turns[3]
      assert_operator long.duration_ns, :>=, 40 * MS * 0.99 # the CPU clock read on the trace's (TSC) clock
      assert_equal [b, c], long.followers.map(&:fiber), "B and C came right after A's long turn"
      # Below the scheduler's hook, gvlscope's wrapper of it (Native::LoopWaits: readiness) and Kernel#sleep.
      assert_equal ["TinyScheduler#kernel_sleep", "GVLScope::Native::LoopWaits#kernel_sleep", "Kernel#sleep",
                    "EventLoopTraceTest#hold_the_loop"], long.site[1, 4].map(&:label)
      assert_equal [__FILE__, GIVE_BACK_LINE], [long.site[4].path, long.site[4].line]
      assert(scan.turns.each_with_index.all? { |turn, i| i == 3 ? turn.site : turn.site.nil? }, "only the long turn has a site")
      assert(scan.turns.none?(&:open))
    end
  end

  def test_the_report_names_the_fiber_that_kept_the_loop_and_its_code
    Dir.mktmpdir do |dir|
      _file, path, _serial, loop_name = record_a_loop(dir)
      report = GVLScope::Analysis::Report.new(GVLScope::Model.timeline(path))
      finding = report.findings.find { |found| found.kind == :loop_stall }
      refute_nil finding, report.findings.map(&:title).inspect
      # No other thread waited for the GVL, so the GVL's sampler took no sample; the trace's drain
      # thread asks for one every 100 ms when a task is 10 ms or more into its turn, which may fall
      # in this 40 ms turn (then the burning line is named) or not (then where it gave the loop back).
      line = finding.evidence[:code_from] == :samples ? BURN_LINE : GIVE_BACK_LINE
      site = "`EventLoopTraceTest#hold_the_loop` (#{GVLScope::Vocabulary.short_site(__FILE__)}:#{line})"
      assert_match(/\AEvent loop stalled: a fiber kept the loop of '#{Regexp.escape(loop_name)}' for \d+ ms \(its code: #{Regexp.escape(site)}\); 2 turns of other fibers came right after\z/,
                   finding.title)
      assert finding.loop_wait
      assert_nil finding.wait_share
      # Its length, once for B and once for C: 40 ms of the thread's CPU clock, read on the trace's
      # clock (the TSC, calibrated against CLOCK_MONOTONIC once: the two agree to well within 1 %).
      assert_operator finding.explains_wait_ns, :>=, 2 * 40 * MS * 0.99
      text, err, status = gvlscope_in_process("report", path) # the command's text report
      assert_equal [0, ""], [status, err]
      assert_includes text, "Findings (#{report.findings.size}), by the wait (GVL or event loop) each explains:"
      assert_includes text, "ms of loop wait] #{finding.title}\n"
      html = File.join(dir, "loop.html")
      _, err, status = gvlscope_in_process("report", path, "--html", html)
      assert_equal [0, "gvlscope: wrote #{html}\n"], [status, err]
      page = File.read(html)
      assert_includes page, JSON.generate(finding.title)
      assert_includes page, %("explains":"#{GVLScope::Units.ms_rounded(finding.explains_wait_ns)} of loop wait")
    end
  end

  # Perfetto shows the turns on a track of their own under the loop's thread: a slice per turn
  # named by its fiber's serial.
  def test_perfetto_shows_each_turn_under_the_loops_thread
    descriptor = File.expand_path("../../../shared/perfetto/perfetto_trace.desc", __dir__)
    skip "protoc not installed (apt-get install protobuf-compiler)" unless system("command -v protoc >/dev/null")
    skip "no #{descriptor}" unless File.exist?(descriptor)

    Dir.mktmpdir do |dir|
      _file, path, loop_thread = record_a_loop(dir)
      timeline = GVLScope::Model.timeline(path, spill: true)
      pftrace = File.join(dir, "loop.pftrace")
      File.open(pftrace, "wb") { |io| GVLScope::Formats::Perfetto.new(timeline).write(io) }
      text, err, status = Open3.capture3("protoc", "--decode=perfetto.protos.Trace", "--descriptor_set_in=#{descriptor}",
                                         stdin_data: File.binread(pftrace), binmode: true)
      assert status.success?, err
      track = 3_000_000_000 + loop_thread
      assert_match(/uuid: #{track}\n\s+name: ".*: fibers"\n\s+parent_uuid: #{1_000_000 + loop_thread}\n/, text)
      events = text.scan(/type: (TYPE_SLICE_BEGIN|TYPE_SLICE_END)\n\s+track_uuid: #{track}\n(?:\s+name: "(fiber \d+)")?/)
      fibers = timeline.turns.map { |turn| "fiber #{turn.fiber}" }
      assert_equal fibers.flat_map { |name| [["TYPE_SLICE_BEGIN", name], ["TYPE_SLICE_END", nil]] }, events
    end
  end

  # While another thread waits for the GVL, the holder sampler catches the loop's thread in the
  # long turn: its code is where the turn spent its time, not only where it ended.
  def test_a_sampled_long_turn_names_the_code_it_ran
    Dir.mktmpdir do |dir|
      _file, path = record_a_loop(dir, beside: true)
      finding = GVLScope::Analysis::Report.new(GVLScope::Model.timeline(path)).findings.find { |found| found.kind == :loop_stall }
      assert_names_the_burning_line(finding)
    end
  end

  # A sampled turn's code: the line where hold_the_loop burns its CPU.
  def assert_names_the_burning_line(finding)
    refute_nil finding
    assert_equal :samples, finding.evidence[:code_from]
    assert_equal({ label: "EventLoopTraceTest#hold_the_loop", path: GVLScope::Vocabulary.short_site(__FILE__), line: BURN_LINE },
                 finding.evidence[:code])
  end

  # A trace (with the loops' turns) of a thread whose Fiber scheduler runs the tasks the block
  # schedules; its path.
  def record_tasks(dir, scheduler: TinyScheduler, &tasks)
    path = File.join(dir, "loop.gvl")
    GVLScope.start(path, fibers: true)
    Thread.new do
      Fiber.set_scheduler(scheduler.new)
      tasks.call
    end.join
    GVLScope.stop
    path
  end

  # A loop's thread that no other thread waits for: the trace's drain thread asks for its stack at
  # each CPU sample (every 100 ms) while a task is 10 ms or more into its turn. A turn of 350 ms of
  # CPU time lasts at least 350 ms: at least two of those samples fall in it.
  def test_a_long_turn_nobody_waits_for_is_sampled_by_the_trace
    Dir.mktmpdir do |dir|
      scan = GVLScope::Model.timeline(record_tasks(dir) do
        Fiber.schedule { hold_the_loop(350) }
        Fiber.schedule { sleep 0 }
      end)
      long = scan.turns.max_by(&:duration_ns)
      # No thread waited for the GVL during the turn (before it, on a loaded machine, the loop's
      # new thread may wait for the test's thread to give the GVL up: a sample of that one).
      assert(scan.samples.none? { |sample| sample.time_ns.between?(long.start_ns, long.end_ns) }, "no waiter's sample in the turn")
      assert_operator scan.lone_samples.size, :>=, 2
      assert(scan.lone_samples.all? { |sample| sample.time_ns.between?(long.start_ns, long.end_ns) }, "only inside the long turn")
      finding = GVLScope::Analysis::Report.new(scan).findings.find { |found| found.kind == :loop_stall }
      assert_names_the_burning_line(finding)
    end
  end

  # Another method that keeps the loop for +ms+ of CPU time, for a second kind of long turn (its
  # own loop, not a call to hold_the_loop: its samples' first frame must be its own).
  def render_the_report(ms)
    deadline = Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) + ms / 1000.0
    x = 0
    x += 1 while Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) < deadline
  end

  # A loop stalled by two pieces of code: a finding for each, ranked by the wait each explains
  # (its turns' lengths, once per fiber that came right after each), each naming its code from the
  # drain thread's samples (a turn of 150 ms or more holds one: one every 100 ms, 10 ms into it).
  def test_each_code_that_stalls_a_loop_has_its_finding
    Dir.mktmpdir do |dir|
      path = record_tasks(dir) do
        done = false
        Fiber.schedule { sleep 0 until done } # a fiber always ready: its turn comes right after each long one
        Fiber.schedule { sleep 0; hold_the_loop(150) }
        Fiber.schedule do
          2.times { sleep 0.001; render_the_report(150); sleep 0 }
          done = true
        end
      end
      findings = GVLScope::Analysis::Report.new(GVLScope::Model.timeline(path)).findings.select { |found| found.kind == :loop_stall }
      codes = findings.map { |found| found.evidence.dig(:code, :label) }
      assert_equal %w[EventLoopTraceTest#hold_the_loop EventLoopTraceTest#render_the_report], codes.first(2).sort,
                   "a finding for each code: #{findings.map(&:title)}"
      # Each turn lasts at least its 150 ms of CPU time (the clocks agree to 1 %), however loaded the
      # machine; which of one such turn and two explains more wait is the machine's (beside two busy
      # loops, hold_the_loop's one turn lasted 294 ms), so each is held to its own bound.
      explains = findings.to_h { |found| [found.evidence.dig(:code, :label), found.explains_wait_ns] }
      assert_operator explains["EventLoopTraceTest#render_the_report"], :>=, 2 * 148 * MS, "two turns: #{findings.map(&:title)}"
      assert_operator explains["EventLoopTraceTest#hold_the_loop"], :>=, 148 * MS, "one turn: #{findings.map(&:title)}"
      assert_equal codes.uniq, codes, "one finding per code"
      assert_equal findings.sort_by { |found| -found.explains_wait_ns }, findings, "ranked by the wait each explains"
    end
  end

  # Many fibers alive at once grow the recorder's fiber table (256 entries at first, half full at
  # most); each keeps its serial across its turns, and an ended fiber's entry goes.
  def test_each_of_many_fibers_keeps_its_serial
    Dir.mktmpdir do |dir|
      path = File.join(dir, "many.gvl")
      GVLScope.start(path, fibers: true)
      Thread.new do
        Fiber.set_scheduler(TinyScheduler.new)
        300.times { Fiber.schedule { 2.times { sleep 0 } } }
      end.join
      GVLScope.stop
      serials = GVLScope::Model::TraceFile.read(path).raw_turns.filter_map { |_, _, kind, value| value if kind == :turn_begin }
      assert_equal 900, serials.size # each: until its first sleep, its second, its end
      first = serials.first
      assert_equal (first...first + 300).to_a * 3, serials, "in the order the loop resumed them, the same serial each time"
    end
  end

  def test_without_stacks_the_turns_are_recorded_without_their_code
    Dir.mktmpdir do |dir|
      file, path = record_a_loop(dir, stacks: false)
      refute_predicate file, :stacks?
      # The scheduler is wrapped (readiness) by a postponed job the first turn asks for: A's first
      # `sleep 0` may come before it, so its next turn may have no TURN_READY.
      kinds = file.raw_turns.map { |_, _, kind, _| kind }
      assert_equal %i[turn_begin turn_end] * 7, kinds - [:turn_ready]
      assert_includes [3, 4], kinds.count(:turn_ready)
      finding = GVLScope::Analysis::Report.new(GVLScope::Model.timeline(path)).findings.find { |found| found.kind == :loop_stall }
      assert_includes finding.title, "(its code: not recorded: a trace without stacks)"
    end
  end

  def test_a_trace_tracks_loops_only_when_asked_or_under_a_fiber_scheduler
    Dir.mktmpdir do |dir|
      GVLScope.start(File.join(dir, "plain.gvl"))
      refute_predicate GVLScope::EventLoops, :tracking?, "no Fiber scheduler: off by default"
      GVLScope.stop
      GVLScope.start(File.join(dir, "asked.gvl"), fibers: true)
      assert_predicate GVLScope::EventLoops, :tracking?
      GVLScope.stop
      refute_predicate GVLScope::EventLoops, :tracking?, "the trace's own tracking ends with it"
      Thread.new do
        Fiber.set_scheduler(TinyScheduler.new)
        GVLScope.start(File.join(dir, "scheduled.gvl"))
        assert_predicate GVLScope::EventLoops, :tracking?, "started from a thread with a Fiber scheduler: on"
        GVLScope.stop
      end.join
      refute_predicate GVLScope::EventLoops, :tracking?
      error = assert_raises(ArgumentError) { GVLScope.start(File.join(dir, "bad.gvl"), fibers: "yes") }
      assert_equal 'fibers must be true, false or nil, got "yes"', error.message
    end
  end

  # `gvlscope run --fibers` records the turns of a program's loops from its start.
  def test_gvlscope_run_fibers_records_the_turns
    Dir.mktmpdir do |dir|
      path = File.join(dir, "run.gvl")
      program = "load #{File.join(ROOT, 'lab/tiny_scheduler.rb').inspect}; " \
                "Thread.new { Fiber.set_scheduler(TinyScheduler.new); Fiber.schedule { sleep 0 } }.join"
      _out, err, status = gvlscope("run", "--fibers", "--no-summary", "-o", path, "--", RbConfig.ruby, "-e", program)
      assert status.success?, err
      assert_equal %i[turn_begin turn_end turn_begin turn_end], GVLScope::Model::TraceFile.read(path).raw_turns.map { |row| row[2] }
      _out, err, status = gvlscope("run", "--no-summary", "-o", File.join(dir, "plain.gvl"), "--", RbConfig.ruby, "-e", program)
      assert status.success?, err
      assert_empty GVLScope::Model::TraceFile.read(File.join(dir, "plain.gvl")).raw_turns, "off unless asked"
    end
  end

  REAP_LINE = __LINE__ + 4 # reap's Process.wait

  # Waits for a child process with Process.wait: TinyScheduler has no `process_wait`, so the thread
  # blocks in waitpid without the GVL, and no other fiber of its loop runs meanwhile.
  def reap(pid) = Process.wait(pid)

  # Task A gives the loop back once (B and C become ready), then blocks in reap until a child
  # started before (its spawn is not in the turn) exits: A's long turn, followed right away by B's
  # and C's. Returns the Model::Scan.
  def record_a_blocked_loop(dir)
    GVLScope::Model.timeline(record_tasks(dir) do
      child = spawn("sleep", "0.2")
      Fiber.schedule do
        sleep 0
        reap(child)
      end
      2.times { Fiber.schedule { sleep 0 } }
    end)
  end

  # The intervals of the loop's thread that overlap +turn+ (the first began before it: a fiber
  # switch is no GVL event), as [state, reason, the site's top label] (a :run interval's site is
  # the one read at the release that ended it).
  def inside(scan, turn)
    scan.intervals_of(turn.thread).select { |interval| interval.end_ns > turn.start_ns && interval.start_ns < turn.end_ns }
        .map { |interval| [interval.state, interval.reason, interval.site&.first&.label] }
  end

  # No other thread waits for the GVL, yet the loop thread's release inside a task's turn has its
  # site (the recorder reads it while a task holds the turn); its releases outside turns (the
  # scheduler's own IO.select, between turns) have none, as any release nobody waits for.
  def test_a_blocking_call_in_a_turn_has_its_release_site
    Dir.mktmpdir do |dir|
      scan = record_a_blocked_loop(dir)
      long = scan.turns.max_by(&:duration_ns)
      assert_equal [[:run, :join, "Process.wait"], [:idle, :join, nil], [:wait, nil, nil]], inside(scan, long).first(3)
      site = scan.intervals_of(long.thread).find { |interval| interval.site }.site
      assert_equal ["Process.wait", "EventLoopTraceTest#reap"], site.first(2).map(&:label)
      assert_equal [__FILE__, REAP_LINE], [site[1].path, site[1].line]
      outside = scan.intervals_of(long.thread).reject do |interval|
        scan.turns.any? { |turn| interval.end_ns.between?(turn.start_ns, turn.end_ns) }
      end
      assert(outside.any? { |interval| interval.state == :run }, "the loop ran between turns")
      assert(outside.none?(&:site), "no site for a release outside a task's turn nobody waited for")
    end
  end

  # The finding names the blocking call (the method, where it was called, in which method), apart
  # from the CPU-bound turn's finding: the turn's time went off the GVL, not in Ruby code.
  def test_a_blocking_call_that_stalls_the_loop_is_named_by_its_release_site
    Dir.mktmpdir do |dir|
      scan = record_a_blocked_loop(dir)
      findings = GVLScope::Analysis::Report.new(scan).findings
      assert_equal [:loop_blocking], findings.map(&:kind) & %i[loop_stall loop_blocking], findings.map(&:title).inspect
      finding = findings.find { |found| found.kind == :loop_blocking }
      long = scan.turns.max_by(&:duration_ns)
      file = GVLScope::Vocabulary.short_site(__FILE__)
      assert_match(/\AEvent loop blocked: fiber #{long.fiber} stalled the loop of '[^']+' for \d+ ms in a blocking call outside the scheduler: `Process.wait` at #{Regexp.escape(file)}:#{REAP_LINE} in `EventLoopTraceTest#reap` \(a \d+ ms turn\); 2 turns of other fibers came right after\z/,
                   finding.title)
      assert_equal({ label: "Process.wait", path: file, line: REAP_LINE }, finding.evidence[:call])
      assert_equal :join, finding.evidence[:cause]
      # The thread's time off the GVL after that release, within the turn.
      idle = scan.intervals_of(long.thread).find { |interval| interval.state == :idle && interval.start_ns.between?(long.start_ns, long.end_ns) }
      assert_equal [idle.end_ns, long.end_ns].min - idle.start_ns, finding.evidence[:blocked_ns]
      assert_equal 2 * long.duration_ns, finding.explains_wait_ns
      assert finding.loop_wait
      assert_match(/use the scheduler-aware call .* or move it to a thread/, finding.fix)
      text, err, status = gvlscope_in_process("report", scan.file.path)
      assert_equal [0, ""], [status, err]
      assert_includes text, "ms of loop wait] #{finding.title}\n"
      json, = gvlscope_in_process("report", scan.file.path, "--format", "json")
      assert_equal finding.title, JSON.parse(json)["findings"].find { |found| found["kind"] == "loop_blocking" }["title"]
    end
  end

  # A scheduler whose sleep waits in its own IO.select, inside the task's turn: the loop stalls,
  # but through the scheduler (the fix is not "use the scheduler-aware call"): a CPU-style stall.
  class SelectInHookScheduler < TinyScheduler
    def kernel_sleep(duration = nil)
      return super if duration.nil? || duration.zero?

      IO.select(nil, nil, nil, duration)
    end
  end

  def test_a_release_through_the_schedulers_own_select_is_not_called_blocking
    Dir.mktmpdir do |dir|
      path = record_tasks(dir, scheduler: SelectInHookScheduler) do
        Fiber.schedule do
          sleep 0
          sleep 0.15
        end
        2.times { Fiber.schedule { sleep 0 } }
      end
      scan = GVLScope::Model.timeline(path)
      long = scan.turns.max_by(&:duration_ns)
      assert_equal [:run, :io, "IO.select"], inside(scan, long).first, "its release site was read: inside a turn"
      kinds = GVLScope::Analysis::Report.new(scan).findings.map(&:kind)
      assert_equal [:loop_stall], kinds & %i[loop_stall loop_blocking]
    end
  end

  # A CPU-bound turn keeps its finding: its time was spent running, not blocked.
  def test_a_cpu_bound_turn_is_not_called_blocking
    Dir.mktmpdir do |dir|
      _file, path = record_a_loop(dir)
      kinds = GVLScope::Analysis::Report.new(GVLScope::Model.timeline(path)).findings.map(&:kind)
      assert_equal [:loop_stall], kinds & %i[loop_stall loop_blocking]
    end
  end

  # Format version 3 (before turns): read as before, with no turns.
  def test_a_version_3_trace_still_reads
    path = File.join(ROOT, "test/fixtures/traces/hog-v3.gvl")
    assert_equal 3, File.binread(path, 4, 8).unpack1("L<")
    file = GVLScope::Model::TraceFile.read(path)
    assert_predicate file, :stacks?
    assert_empty file.raw_turns
    scan = GVLScope::Model.timeline(path)
    assert_empty scan.turns
    assert_equal file.size, scan.file.size
    assert_equal file.records, scan.file.records
  end
end
