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
      result = GVLScope::Lab::Runner.new(knobs, out_dir: dir).run(scenario)
      assert_equal %i[holds differs holds], result.verdicts.map(&:status), result.verdicts.map(&:measured).inspect
      assert_match(/working/, result.output)
      assert_empty result.findings
      assert File.exist?(result.trace)
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
      markdown = File.read(File.join(dir, "lab.md"))
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
end
