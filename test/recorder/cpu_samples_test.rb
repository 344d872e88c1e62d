# frozen_string_literal: true

require "test_helper"
require "tmpdir"
require "gvlscope/model"
require "gvlscope/analysis"

# Holds are wall time; the drain thread samples each native thread's CPU time every 100 ms (CPU
# chunks, format version 3; never the hook) so the report can tell a hold's running time from the
# time the OS kept its holder off a CPU (issue 37). Real runs, in fresh processes.
class CPUSamplesTest < Minitest::Test
  include GVLScopeTestHelper

  MS = 1_000_000

  # A thread that holds the GVL for +seconds+ of wall time (a loop on a C clock call: no release).
  def busy_holder(seconds)
    <<~RUBY
      Thread.new do
        deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + #{seconds}
        x = 0
        x += 1 while Process.clock_gettime(Process::CLOCK_MONOTONIC) < deadline
      end.tap { |thread| thread.name = "job 1" }
    RUBY
  end

  def test_the_trace_samples_cpu_time_every_100_ms_within_physical_bounds
    Dir.mktmpdir("gvlscope-cpu") do |dir|
      path = File.join(dir, "t.gvl")
      trace_program(path, "#{busy_holder(0.45)}.join")
      file = GVLScope::Model::TraceFile.read(path)
      ticks = file.cpu_ticks.unpack("q<*")
      assert_operator ticks.size, :>=, 3, "a 450 ms trace has a sample at start and every 100 ms"
      ticks.each_cons(2) { |a, b| assert_operator b - a, :>=, 100 * MS, "ticks #{ticks.inspect}" }
      assert_operator ticks.last, :<=, file.duration_ns
      samples = file.cpu_samples.unpack("Q<*").each_slice(3).group_by(&:first)
      assert_operator samples.size, :>=, 2, "the main thread's and the holder's native threads"
      samples.each_value do |lane|
        lane.each_cons(2) do |(_, t0, cpu0), (_, t1, cpu1)|
          assert_operator cpu1, :>, cpu0, "a native thread is listed again only when its CPU time grew"
          assert_operator cpu1 - cpu0, :<=, t1 - t0 + 2 * MS, "no thread runs faster than the wall clock"
        end
      end
    end
  end

  # The whole process is stopped (SIGSTOP) for 600 ms while 'job 1' holds the GVL: its hold is
  # wall time, but at least those 600 ms it did not run. The drain thread stops too; its samples
  # before and after the stop are inside the hold.
  def test_a_holder_stopped_by_sigstop_shows_the_stop_off_a_cpu
    Dir.mktmpdir("gvlscope-cpu") do |dir|
      path = File.join(dir, "t.gvl")
      trace_program(path, <<~RUBY)
        holder = #{busy_holder(1.4)}
        stopper = Process.spawn("sleep 0.4; kill -STOP \#{Process.pid}; sleep 0.6; kill -CONT \#{Process.pid}")
        holder.join
        Process.wait(stopper)
      RUBY
      report = GVLScope::Analysis::Report.new(GVLScope::Model::Scan.open(path))
      job = report.all_rows.find { |row| row.label.start_with?("job 1") }
      assert_operator job.run_ns, :>=, 1000 * MS
      assert_operator job.held_off_cpu_ns, :>=, 600 * MS, "the 600 ms stop counts off a CPU"
      assert_operator job.held_off_cpu_ns, :<=, job.run_ns + job.gc_ns
    end
  end
end
