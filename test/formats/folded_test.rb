# frozen_string_literal: true

require "test_helper"
require "tmpdir"
require_relative "../support/speedscope"

# `gvlscope export --format folded`: the wait-weighted holder profile as folded stacks, checked
# line by line against the trace's samples and opened in a real reader of the format (speedscope,
# which imports folded stacks by their content, as flamegraph.pl and inferno read them).
# Run alone: bundle exec ruby -Ilib -Itest test/formats/folded_test.rb
class FoldedTest < Minitest::Test
  include GVLScopeTestHelper
  include SpeedscopeViewer

  # As every output names code (Model::Frame#shown): the path relative to the working directory.
  SPIN = "GVLWorkloads.spin (#{GVLScope::Vocabulary.short_site(File.join(ROOT, 'test/support/gvl_workloads.rb'))}:" \
         "#{GVLWorkloads::SPIN_LINE})".freeze

  def test_the_hogs_stack_is_the_heaviest_and_speedscope_reads_it
    Dir.mktmpdir("gvlscope-folded") do |dir|
      trace, file = trace_and_export(dir, 'GVLWorkloads.cpu_beside_reader("cpu", 6)', "folded")
      folded = File.read(file)

      lines = folded.lines(chomp: true)
      refute_empty lines
      assert folded.end_with?("\n")
      parsed = lines.map do |line|
        stack, weight = line.match(/\A(.+) (\d+)\z/)&.captures
        assert stack, "not a folded line: #{line.inspect}"
        [stack.split(";"), Integer(weight)]
      end
      assert_equal parsed.map(&:first).uniq, parsed.map(&:first), "a stack appears twice"
      # Each stack root first, weighted by the waiters of its samples.
      expected = Hash.new(0)
      GVLScope::Model.timeline(trace).samples.each do |sample|
        expected[sample.stack.reverse.map { |frame| frame.shown.to_s }] += sample.waiters
      end
      assert_equal expected.sort, parsed.sort

      heaviest, weight = parsed.max_by(&:last)
      assert_equal SPIN, heaviest.last, folded
      assert_operator weight, :>=, 0.8 * parsed.sum(&:last), folded

      shown = open_in_speedscope(file)
      assert_empty shown.errors, shown.log.join("\n")
      assert_includes shown.log.join("\n"), "Importing as collapsed stack format"
      rows = shown.profiles.first.rows
      assert_equal SPIN, rows.max_by { |row| row.self_weight.percent }.name, rows.map(&:to_a).inspect
    end
  end

  def test_a_trace_without_stacks_is_a_one_line_error
    Dir.mktmpdir("gvlscope-folded") do |dir|
      trace = File.join(dir, "convoy.gvl")
      FileUtils.cp(File.join(ROOT, "test/fixtures/traces/convoy.gvl"), trace) # a version 1 trace
      out, err, status = gvlscope("export", trace, "--format", "folded")
      assert_equal 1, status.exitstatus
      assert_empty out
      assert_equal "gvlscope: #{trace}: no stacks recorded (traced with --no-stacks, or not a gvlscope v2 trace)\n", err
      refute File.exist?(File.join(dir, "convoy.folded")), "an empty output file was left behind"

      _out, err, status = gvlscope("run", "--no-stacks", "--format", "folded", "--", RbConfig.ruby, "-e", "exit 3")
      assert_equal 2, status.exitstatus, "refused before the program runs"
      assert_match(/--format folded needs stacks/, err)
    end
  end
end
