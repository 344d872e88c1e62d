# frozen_string_literal: true

require_relative "../test_helper"
require "fileutils"
require "stringio"
require "tmpdir"
require "gvlscope/cli"

# The outputs of recorded traces (test/fixtures/traces; hog.gvl and thrash.gvl have stacks, format
# version 2, made by hog.rb and thrash.rb there; hog-v3.gvl is hog.rb recorded in format version 3;
# loop.gvl, format version 4, has an event loop's turns, made by loop.rb; and the gvl-tracing fixture), byte for
# byte: a change to the model, the analysis or a format that changes what users see shows up
# here. When the change is meant, write the new expectations with GOLDEN=write and review the diff.
class GoldenTest < Minitest::Test
  TRACES = File.join(GVLScopeTestHelper::ROOT, "test/fixtures/traces")
  EXPECTED = File.join(TRACES, "expected")
  INPUTS = %w[convoy.gvl counters.gvl mixed.gvl ractor.gvl hog.gvl hog-v3.gvl thrash.gvl loop.gvl loop-blocking.gvl gvl-tracing-1.7.0.json].freeze
  # Small enough to keep; the others' exports are checked by test/formats/export_test.rb's invariants.
  EXPORTED = %w[convoy.gvl counters.gvl ractor.gvl hog.gvl loop.gvl gvl-tracing-1.7.0.json].freeze
  # The traces recorded with stacks: their folded stacks and pprof profile too (the others have none to export).
  WITH_STACKS = %w[hog.gvl].freeze

  def cli(*args)
    out = StringIO.new(+"".b)
    err = StringIO.new
    status = GVLScope::CLI.new(out: out, err: err).run(args)
    assert_equal 0, status, err.string
    out.string
  end

  def check(name, actual)
    path = File.join(EXPECTED, name)
    if ENV["GOLDEN"] == "write"
      FileUtils.mkdir_p(EXPECTED)
      File.binwrite(path, actual)
    else
      assert File.exist?(path), "no #{path}: GOLDEN=write creates it"
      expected = File.binread(path)
      assert expected == actual.b, "#{name} changed (GOLDEN=write to accept):\n#{first_difference(expected, actual.b)}"
    end
  end

  def first_difference(expected, actual)
    at = (0...[expected.size, actual.size].min).find { |i| expected[i] != actual[i] } || [expected.size, actual.size].min
    "at byte #{at}: expected #{expected[[at - 40, 0].max, 80].inspect}\n           got #{actual[[at - 40, 0].max, 80].inspect}"
  end

  def test_reports_and_summaries
    Dir.chdir(TRACES) do
      INPUTS.each do |input|
        base = File.basename(input, ".*")
        check("#{base}.report.txt", cli("report", input))
        check("#{base}.report.json", cli("report", input, "--json"))
        check("#{base}.report.md", cli("report", input, "--format", "markdown"))
        check("#{base}.summary.txt", cli("summary", input))
      end
    end
  end

  def test_exports
    Dir.mktmpdir("gvlscope-golden") do |dir|
      Dir.chdir(TRACES) do
        EXPORTED.each do |input|
          base = File.basename(input, ".*")
          { "perfetto" => "pftrace", "chrome-json" => "chrome.json", "speedscope" => "speedscope.json",
            "firefox" => "firefox.json" }.each do |format, extension|
            out = File.join(dir, "#{base}.#{extension}")
            cli("export", input, "--format", format, "-o", out)
            check("#{base}.#{extension}", File.binread(out))
          end
        end
        WITH_STACKS.each do |input|
          { "folded" => "folded", "pprof" => "pb.gz" }.each do |format, extension|
            out = File.join(dir, "#{File.basename(input, '.*')}.#{extension}")
            cli("export", input, "--format", format, "-o", out)
            check(File.basename(out), File.binread(out))
          end
        end
      end
    end
  end
end
