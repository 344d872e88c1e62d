# frozen_string_literal: true

require "test_helper"
require "tmpdir"
require "json"
require "stringio"
require "minitest/mock"
require "gvlscope/lab"
require "gvlscope/lab/runner"

# The lab's verdict machinery, and every scenario run at its tiny size. Timing claims are not
# asserted here (a loaded 2-core machine may make them differ: that is a result, shown as such);
# the numbers must be there and the deterministic claims must hold.
class LabTest < Minitest::Test
  include GVLScopeTestHelper

  def claim(**overrides)
    GVLScope::Lab::Claim.new(text: "x is small", published: "1", tolerance: "< 10",
                             measured: ->(m) { m.fetch(:x).to_s }, holds: ->(m) { m.fetch(:x) < 10 }, **overrides)
  end

  def test_a_claim_holds_differs_or_cannot_be_judged
    assert_equal :holds, claim.judge({ x: 3 }).status
    verdict = claim.judge({ x: 30 })
    assert_equal :differs, verdict.status
    assert_equal "DIFFERS", verdict.label
    assert_equal "30", verdict.measured
    missing = claim.judge({})
    assert_equal :not_measured, missing.status
    assert_match(/KeyError/, missing.error)
    skipped = claim(applies: ->(_m) { "needs --mn" }).judge({ x: 3 })
    assert_equal :not_applicable, skipped.status
    assert_equal "needs --mn", skipped.measured
  end

  # A scenario engineered to fail one claim and pass another, run for real (traced, judged).
  def test_the_runner_judges_a_scenario_from_its_own_numbers_and_trace
    Dir.mktmpdir("gvlscope-lab") do |dir|
      program = File.join(dir, "engineered.rb")
      File.write(program, <<~RUBY)
        require #{File.join(ROOT, 'lab/lab_helper').inspect}
        include LabHelper
        say "working"
        Thread.new { Thread.current.name = "sleeper"; sleep 0.01 }.join
        result(answer: 42)
      RUBY
      scenario = GVLScope::Lab::Scenario.new(
        name: "engineered", file: program, summary: "test", source: "test", seconds: 1,
        from_trace: ->(timeline, _report) { { threads: timeline.threads.values.map(&:label).sort } },
        claims: [
          claim(text: "the answer is 42", measured: ->(m) { m[:answer].to_s }, holds: ->(m) { m[:answer] == 42 }),
          claim(text: "the answer is 43", measured: ->(m) { m[:answer].to_s }, holds: ->(m) { m[:answer] == 43 }),
          claim(text: "the trace saw the sleeper", measured: ->(m) { m[:threads].join(",") },
                holds: ->(m) { m[:threads].include?("sleeper") }),
        ]
      )
      knobs = GVLScope::Lab::Runner::Knobs.new(size: "tiny", priority: 0)
      # Another user's link at the name the result once had: the scenario must not write through it.
      victim = File.join(dir, "victim")
      File.write(victim, "precious")
      planted = File.join(Dir.tmpdir, "gvlscope-lab-#{Process.pid}-engineered.json")
      File.symlink(victim, planted)
      result = GVLScope::Lab::Runner.new(knobs, out_dir: dir).run(scenario)
      assert_equal %i[holds differs holds], result.verdicts.map(&:status), result.verdicts.map(&:measured).inspect
      assert_match(/working/, result.output)
      assert_empty result.findings
      assert File.exist?(result.trace)
      assert_equal "precious", File.read(victim)
      assert_equal victim, File.readlink(planted)
    ensure
      File.unlink(planted) if planted && File.symlink?(planted)
    end
  end

  # Without a writable checkout the lab builds its extension in /tmp/gvlscope-<uid> and loads it:
  # such a directory made by another user is refused.
  def test_the_scratch_directory_in_tmp_must_be_ours
    skip "needs root to give a directory away" unless Process.euid.zero? && (nobody = Etc.getpwnam("nobody"))

    Dir.mktmpdir("gvlscope-tmp") do |tmp|
      squatted = File.join(tmp, "gvlscope-0")
      Dir.mkdir(squatted)
      File.chown(nobody.uid, nobody.gid, squatted)
      old_tmpdir = ENV.fetch("TMPDIR", nil)
      ENV["TMPDIR"] = tmp
      error = assert_raises(GVLScope::Error) { GVLScope::Lab.private_tmp }
      assert_equal "#{squatted} belongs to uid #{nobody.uid}, not to us (uid 0)", error.message
      File.chown(0, 0, squatted)
      assert_equal squatted, GVLScope::Lab.private_tmp
    ensure
      ENV["TMPDIR"] = old_tmpdir
    end
  end

  def scenario_of(dir, name, source)
    program = File.join(dir, "#{name}.rb")
    File.write(program, source)
    GVLScope::Lab::Scenario.new(name: name, file: program, summary: "test", source: "test", seconds: 1, claims: [])
  end

  # A zombie (killed, not reaped yet by whoever adopted it) is not alive.
  def alive?(pid)
    File.read("/proc/#{pid}/stat")[/\) (\S)/, 1] != "Z"
  rescue Errno::ENOENT
    false
  end

  # A scenario that hangs after starting a helper that holds its output pipe (as the thread sweep's
  # wrk and servers do): stopped with one error, its helper too, and no reader thread dies of the
  # pipe closed under it ("IOError: stream closed in another thread").
  def test_a_silent_scenario_is_stopped_with_what_it_started
    Dir.mktmpdir("gvlscope-lab") do |dir|
      helper_pid = File.join(dir, "helper.pid")
      scenario = scenario_of(dir, "hangs", <<~RUBY)
        $stdout.sync = true
        File.write(#{helper_pid.inspect}, spawn("sleep", "600").to_s)
        puts "started a helper"
        sleep
      RUBY
      runner = GVLScope::Lab::Runner.new(GVLScope::Lab::Runner::Knobs.new(size: "tiny", priority: 0), out_dir: dir, silence_limit: 2)
      error = nil
      _out, err = capture_io { error = assert_raises(GVLScope::Error) { runner.run(scenario) } }
      assert_match(/\Alab hangs: no output for 2 s; stopped:\nstarted a helper\n\z/, error.message)
      assert_empty err, "a thread died (Thread.report_on_exception)"
      pid = Integer(File.read(helper_pid))
      # Its output pipe closes as it exits, a moment before it is a zombie.
      50.times { alive?(pid) ? sleep(0.1) : break }
      refute alive?(pid), "the scenario's helper #{pid} outlived it"
    end
  end

  # Silence, not the whole run, is what stops a scenario: one that a busy machine slows down but
  # that still says what it does finishes.
  def test_a_slow_scenario_that_speaks_is_not_stopped
    Dir.mktmpdir("gvlscope-lab") do |dir|
      scenario = scenario_of(dir, "slow", <<~RUBY)
        require #{File.join(ROOT, 'lab/lab_helper').inspect}
        include LabHelper
        $stdout.sync = true
        8.times { |i| say "step \#{i}"; sleep 0.5 }
        result(steps: 8)
      RUBY
      runner = GVLScope::Lab::Runner.new(GVLScope::Lab::Runner::Knobs.new(size: "tiny", priority: 0), out_dir: dir, silence_limit: 3)
      result = runner.run(scenario)
      assert_equal 8, result.measured[:steps]
      assert_operator result.seconds, :>, 3, "the run outlasted the silence limit"
    end
  end

  def test_every_scenario_runs_at_its_tiny_size
    Dir.mktmpdir("gvlscope-lab") do |dir|
      out, err, status = gvlscope("lab", "all", "--size", "tiny", "-o", dir, "--write", File.join(dir, "lab.md"))
      assert status.success?, "#{out}\n#{err}"
      GVLScope::Lab.scenarios.each_key { |name| assert_match(/^#{name}: /, out) }
      refute_match(/\[not measured\]/, out, "a claim's numbers are missing")
      # Deterministic claims: they hold on any machine.
      assert_match(/\[holds\] With a Mutex the count is exact/, out)
      assert_match(/\[holds\] The token goes around every ring/, out)
      assert_match(/\[n\/a\] M:N threads/, out)
      # The thread sweep: every mix swept and judged (the numbers and verdicts depend on the machine).
      %w[cpu-heavy io-heavy mixed].each do |mix|
        assert_match(/^  \[(holds|DIFFERS)\] #{mix}: the advisor's count is inside the measured knee$/, out)
        measured = out[/^  \[(?:holds|DIFFERS)\] #{mix}: the advisor's count.*\n(?:.*\n)*?      measured:  (.*)$/, 1]
        # The mixed mix's two endpoints are two routes, kept apart; a mix of one endpoint has one.
        kinds = mix == "mixed" ? "; per endpoint \\(GVLScope::Rack's routes\\), hold D and idle Z: cpu D [\\d.]+ ms, Z [\\d.]+ ms; " \
                                 "io D [\\d.]+ ms, Z [\\d.]+ ms; as one mean request the answer would be \\d+" : ""
        assert_match(/\Aadvisor \d+ \(the median of 1 untraced runs at 5 threads read live, one per round: \d+; in its round run \d+ %, GVL wait \d+ %, idle \d+ %, 1 \/ run share [\d.]+; the pool's CPU ([\d.]+|\?) ms and GVL run [\d.]+ ms per request; \d+ % of its time waiting for a CPU core; \d+ % waiting for the GVL while its IO was on its way, counted as idle#{kinds}\); traced at 5 threads: \d+ \(run \d+ %, GVL wait \d+ %, idle \d+ %, \d+ requests\/s\); knee (\d+|none); (inside|too few|too many|outside|no knee): /, measured)
        # Tiny: one round, so one live reading, and its count is the judged one, swept and marked.
        advised = measured[/\Aadvisor (\d+)/, 1]
        assert_equal advised, measured[/one per round: (\d+);/, 1]
        table = out[/^  #{mix} \(.*\n  \n(?:  \|.*\n)+/]
        assert_match(/^  \| #{advised} \| \d+ \(\d+-\d+\) \| \d+ \(\d+-\d+\) \| (yes|no) \| [a-z, ]*advisor/, table)
        assert_match(/^  #{mix} \(.* per request; 1 round\(s\) of 1 s per count; .*\):$/, out)
      end
      assert_equal 3, out.scan(/^  \| threads \| requests\/s \(median; min-max\) \| p99 ms \(median; min-max\) \| meets both \| \|$/).size
      assert_operator out.scan(/^  \| 16 \| \d+ \(\d+-\d+\) \| \d+ \(\d+-\d+\) \| (yes|no) \|/).size, :>=, 3
      markdown = File.read(File.join(dir, "lab.md"))
      assert_match(/^## thread-sweep$/, markdown)
      assert_match(/^## convoy$/, markdown)
      assert_match(/^\| claim \| published \| measured \| tolerance \| verdict \|$/, markdown)
    end
  end

  def test_bad_input
    _out, err, status = gvlscope("lab", "run", "nosuch", "--size", "tiny")
    assert_equal 1, status.exitstatus
    assert_match(/no lab scenario named "nosuch"/, err)
    _out, err, status = gvlscope("lab", "run", "race", "--size", "huge")
    assert_equal 2, status.exitstatus
    assert_match(/invalid argument: --size huge/, err)
    _out, err, status = gvlscope("lab", "run", "race", "--ruby", "/nonexistent/ruby")
    assert_equal 1, status.exitstatus
    assert_match(%r{--ruby /nonexistent/ruby: no executable}, err)
    _out, err, status = gvlscope("lab", "run", "race", "--priority", "9")
    assert_equal 2, status.exitstatus
    assert_match(/--priority must be -3..3/, err)
    out, _err, status = gvlscope("lab", "run", "--help")
    assert status.success?
    assert_match(/--timeslice MS/, out)
  end

  # vm.max_map_count: CRuby maps 2 per thread; past the cap it dies with "[FATAL] failed to
  # allocate memory". The lab says so, and how to raise it, before.
  def test_the_map_limit_check_names_the_cap_and_how_to_raise_it
    require "gvlscope/lab/map_limit"
    limit = GVLScope::Lab::MapLimit
    problem = limit.problem(100_000, limit: 65_530, in_use: 200)
    assert_match(/100000 more threads need ~201200 memory mappings/, problem)
    assert_match(/vm\.max_map_count = 65530/, problem)
    assert_match(/sudo sysctl -w vm\.max_map_count=262144/, problem)
    assert_nil limit.problem(10_000, limit: 65_530, in_use: 200)
    assert_nil limit.problem(100_000, limit: 262_144, in_use: 200)
    assert_nil limit.problem(100_000, limit: nil, in_use: 200), "no cap to read (not Linux): no check"
    Dir.mktmpdir do |dir|
      File.write(File.join(dir, "max_map_count"), "65530\n")
      assert_equal 65_530, limit.max_map_count(File.join(dir, "max_map_count"))
      assert_nil limit.max_map_count(File.join(dir, "absent"))
    end
  end

  # The ring skips a ring that would not fit (stubbed cap), says why, and judges the rings that ran.
  def test_the_ring_skips_a_ring_over_the_map_limit_instead_of_crashing
    Dir.mktmpdir do |dir|
      stub = File.join(dir, "stub.rb")
      File.write(stub, <<~RUBY)
        require #{File.join(ROOT, "lib/gvlscope/lab/map_limit").inspect}
        GVLScope::Lab::MapLimit.define_singleton_method(:max_map_count) { |*| 2_000 }
      RUBY
      result = File.join(dir, "result.json")
      out, err, status = run_process([RbConfig.ruby, "-r", stub, File.join(ROOT, "lab/ring.rb")],
                                     env: { "GVLSCOPE_LAB_SIZE" => "tiny", "GVLSCOPE_LAB_RESULT" => result })
      assert status.success?, err
      assert_match(/1000 threads: skipped: .*vm\.max_map_count = 2000; raise it: sudo sysctl -w vm\.max_map_count=262144/, out)
      measured = JSON.parse(File.read(result), symbolize_names: true)
      measured[:rings] = measured[:rings].transform_keys(&:to_s)
      assert measured[:rings]["200"][:delivered]
      verdicts = GVLScope::Lab.fetch("ring").claims.map { |c| c.judge(measured) }
      assert_equal :holds, verdicts.first.status
      assert_equal "200: ok, 1000: skipped (vm.max_map_count)", verdicts.first.measured
      refute_includes verdicts.map(&:status), :not_measured
    end
  end

  def test_lab_run_warns_before_a_ring_that_cannot_fit
    require "gvlscope/lab/cli"
    require "gvlscope/lab/map_limit"
    out = StringIO.new
    err = StringIO.new
    cli = GVLScope::Lab::CLI.new(out: out, err: err)
    GVLScope::Lab::MapLimit.stub(:max_map_count, 65_530) do
      cli.send(:warn_map_limit, GVLScope::Lab.fetch("ring"), "full")
      cli.send(:warn_map_limit, GVLScope::Lab.fetch("ring"), "small")
    end
    assert_equal 1, err.string.lines.size, err.string
    assert_match(/gvlscope lab: warning: 100000 more threads .* vm\.max_map_count = 65530; raise it: sudo sysctl/, err.string)
  end

  # The help's "default tmp/lab": under the current directory, not in the gem's (a checkout or an
  # installed gem that happens to be writable).
  def test_lab_run_writes_traces_under_the_current_directory
    require "gvlscope/lab/cli"
    require "gvlscope/lab/runner"
    given = nil
    stopped = Class.new(StandardError)
    capture = lambda do |_knobs, out_dir:, echo:, force:|
      given = out_dir
      raise stopped, echo.class.name
    end
    Dir.mktmpdir("gvlscope-lab-cwd") do |dir|
      Dir.chdir(dir) do
        GVLScope::Lab::Runner.stub(:new, capture) do
          assert_raises(stopped) { GVLScope::Lab::CLI.new(out: StringIO.new, err: StringIO.new).run(%w[run convoy]) }
        end
      end
      assert_equal File.join(File.realpath(dir), "tmp", "lab"), given
    end
  end

  # The knee and the verdicts of the thread sweep, on made-up numbers.
  def test_the_sweep_knee_and_verdicts
    require "gvlscope/lab/sweep"
    sweep = GVLScope::Lab::Sweep
    counts = [1, 2, 4, 8, 16]
    runs = {
      1 => { rps: [100, 110, 90], p99_ms: [300, 320, 310] },
      2 => { rps: [190, 180, 200], p99_ms: [160, 170, 150] },
      4 => { rps: [380, 390, 370], p99_ms: [85, 80, 90] },  # 380: 97 % of the best; p99 85 <= 1.1 x 80
      8 => { rps: [400, 390, 395], p99_ms: [80, 82, 78] },  # the best throughput (395) and p99 (80)
      16 => { rps: [395, 380, 390], p99_ms: [120, 140, 130] }, # p99 130 > 88
    }
    judged = sweep.judge(runs, counts: counts, recommended: 4)
    assert_equal [395, 80], [judged.best_rps, judged.best_p99_ms]
    assert_equal [4, 8], [judged.knee, judged.upper]
    assert_equal [false, false, true, true, false], judged.points.map(&:qualifies)
    assert_equal [370, 390], judged.point(4).rps_range
    assert_equal :inside, judged.verdict
    assert_equal :inside, sweep.judge(runs, counts: counts, recommended: 8).verdict, "one swept count above the knee"
    assert_equal :too_few, sweep.judge(runs, counts: counts, recommended: 2).verdict
    too_many = sweep.judge(runs, counts: counts, recommended: 16)
    assert_equal :too_many, too_many.verdict
    assert_match(/16 threads: 390 requests\/s \(99 % of the best\), p99 130 ms \(162 % of the best\): more threads than the knee's 4 \(or 8\) needs/, too_many.reason)
    # A count between two swept ones (the advisor's own) that falls short.
    with_six = runs.merge(6 => { rps: [300], p99_ms: [100] })
    outside = sweep.judge(with_six, counts: counts, recommended: 6)
    assert_equal :outside, outside.verdict
    assert_equal :not_measured, sweep.judge(runs, counts: counts, recommended: 5).verdict
    no_knee = sweep.judge({ 1 => { rps: [100], p99_ms: [50] }, 2 => { rps: [200], p99_ms: [90] } }, counts: [1, 2], recommended: 2)
    assert_equal [nil, :no_knee], [no_knee.knee, no_knee.verdict]
    table = sweep.table(judged)
    assert_equal "| 4 | 380 (370-390) | 85 (80-90) | yes | knee, advisor |", table[4]
    assert_equal 2 + runs.size, table.size
  end
end
