# frozen_string_literal: true

require "test_helper"
require "tmpdir"
require "support/cli_fuzz"

# A few of issue 37's fuzz (bench/fuzz_cli.rb runs the 1,000 traces and 1,200 snapshots): mutated
# traces through report (every format, --html), export (every format), summary, advise and diff;
# mutated snapshot files and scrapes through diff and advise. None may print "internal error" or a
# backtrace, nor leave a temporary file (before: `export --format pprof` of a trace starting after
# 2106 was "internal error: RangeError" and left a 0-byte file).
class CLIFuzzTest < Minitest::Test
  def test_mutated_inputs_through_every_command
    Dir.mktmpdir("gvlscope-cli-fuzz") do |dir|
      fuzz = CLIFuzz.new(dir: dir, seed: Integer(ENV.fetch("GVLSCOPE_FUZZ_SEED", 37))).traces(25).snapshots(20)
      assert_empty fuzz.failures.map(&:to_s)
      assert_equal 25 * 15 + 20 * 3, fuzz.runs
      assert_operator fuzz.statuses[0], :>, 0, "some mutations must still read"
      assert_operator fuzz.statuses[1], :>, 0, "some must be refused"
    end
  end
end
