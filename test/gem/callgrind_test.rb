# frozen_string_literal: true

require_relative "../test_helper"
require_relative "../../bench/support/callgrind"

# The instruction benchmarks' driver (bench/support/callgrind.rb) on programs that are quick under
# callgrind: a Ruby starts too slowly under it for the benchmarks themselves to run in the suite.
class CallgrindTest < Minitest::Test
  include GVLScopeTestHelper

  def setup
    skip "valgrind is not installed (apt-get install valgrind)" unless Callgrind.available?
  end

  def test_a_whole_run_is_counted
    assert_operator Callgrind.instructions("/bin/true"), :>, 10_000
  end

  def test_a_server_is_counted_in_windows
    Dir.mktmpdir("gvlscope-callgrind") do |dir|
      log = File.join(dir, "log")
      session = Callgrind.session({}, "/bin/sh", "-c", "while :; do :; done", dir: dir, log: log)
      begin
        deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + GVLScopeTestHelper.hang_limit(30)
        sleep 0.2 until File.read(log).include?("For interactive control") ||
                        Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
        counted = session.window("busy") { sleep 0.5 }
        assert_operator counted, :>, 1_000, File.read(log)
      ensure
        session.stop
      end
    end
  end
end
