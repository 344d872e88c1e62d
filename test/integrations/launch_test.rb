# frozen_string_literal: true

require_relative "../test_helper"
require "gvlscope/integrations/launch"

# The one environment `gvlscope run`, `gvlscope top -- COMMAND` and the lab launch a program in.
class LaunchTest < Minitest::Test
  def test_every_variable_autorun_reads_is_set_or_unset
    env = GVLScope::Launch.environment(output: "t-%p.gvl", run_dir: "/run/x")
    read = File.read(File.join(GVLScopeTestHelper::ROOT, "lib/gvlscope/integrations/autorun.rb")).scan(/GVLSCOPE_[A-Z_]+/).uniq
    assert_operator read.size, :>=, 7, read.inspect
    # A nil unsets it: a GVLSCOPE_TRACE=0 left in the caller's environment does not reach the program.
    assert_empty read - env.keys
    assert_equal({ "GVLSCOPE_OUTPUT" => "t-%p.gvl", "GVLSCOPE_RUN_DIR" => "/run/x" }, env.compact.except("RUBYOPT"))
  end

  def test_rubyopt_keeps_the_callers_and_loads_autorun_from_this_lib
    lib = File.join(GVLScopeTestHelper::ROOT, "lib")
    ENV.stub(:fetch, ->(name, *default) { name == "RUBYOPT" ? "-W0" : default.first }) do
      env = GVLScope::Launch.environment(load_path: ["/ext"], stacks: false, live: true, trace: false, metrics_only: true,
                                         buffer_mb: 1024, fibers: true)
      assert_equal "-W0 -I/ext -I#{lib} -rgvlscope/autorun", env["RUBYOPT"]
      assert_equal({ "GVLSCOPE_STACKS" => "0", "GVLSCOPE_LIVE" => "1", "GVLSCOPE_TRACE" => "0", "GVLSCOPE_METRICS_ONLY" => "1",
                     "GVLSCOPE_BUFFER_MB" => "1024", "GVLSCOPE_FIBERS" => "1" }, env.compact.except("RUBYOPT"))
    end
  end
end
