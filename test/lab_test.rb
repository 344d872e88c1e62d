# frozen_string_literal: true

require "test_helper"
require "tmpdir"
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
end
