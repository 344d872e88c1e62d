# frozen_string_literal: true

require "test_helper"
require "open3"
require "rbconfig"

# The recorder's clock (ext/gvlscope/clock.c): the TSC, calibrated at load against CLOCK_MONOTONIC.
# Its rate must be the monotonic clock's in every process, whatever the machine's load at load
# time: a calibration that a preemption fell into once made a process's clock run 4.7x slow (a
# 0.5 s interval read 0.106 s). Each child Ruby loads the extension under the load its siblings
# make, and reads both clocks across 200 ms.
class ClockTest < Minitest::Test
  CHILDREN = 8

  # A preemption of 20 ms inside the calibration's first reading (as a loaded machine makes one):
  # the reading it fell in is not the one taken. With one bracket only (before), the rate read 0.17: 6x slow.
  def test_a_preemption_in_the_calibration_does_not_change_the_rate
    assert_in_delta 1.0, ratios(1, "GVLSCOPE_TEST_CALIBRATION_STALL_US" => "20000").first, 0.05
  end

  def test_the_clock_runs_at_the_monotonic_clocks_rate_in_every_process
    ratios(CHILDREN).then { |all| all.each { |ratio| assert_in_delta 1.0, ratio, 0.05, all.inspect } }
  end

  # The rate of the clock of each of +count+ child Rubies against CLOCK_MONOTONIC, side by side.
  def ratios(count, env = {})
    script = <<~RUBY
      require "gvlscope"
      mono = -> { Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond) }
      # Both clocks at one moment: the narrowest of a few monotonic brackets around the read.
      both = lambda do
        5.times.map { before = mono.(); now = GVLScope::Native.now_ns; after = mono.(); [after - before, now, (before + after) / 2] }
         .min_by(&:first).drop(1)
      end
      tsc0, mono0 = both.()
      sleep 0.2
      tsc1, mono1 = both.()
      puts (tsc1 - tsc0).fdiv(mono1 - mono0)
    RUBY
    # Side by side: the siblings' loading and spinning is the load the calibration meets.
    # Each pair of readings is the narrowest of five brackets (microseconds in 200 ms); a
    # miscalibrated rate is off by the preemption over the calibration's 2 ms: 2x and more.
    children = Array.new(count) { Open3.popen3(env, RbConfig.ruby, "-I", File.join(GVLScopeTestHelper::ROOT, "lib"), "-e", script) }
    children.map do |stdin, stdout, stderr, wait|
      stdin.close
      out = stdout.read
      assert wait.value.success?, stderr.read
      Float(out)
    end
  end
end
