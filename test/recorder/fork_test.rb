# frozen_string_literal: true

require "test_helper"
require "tmpdir"

class ForkTest < Minitest::Test
  include GVLScopeTestHelper

  # The child must neither hang nor write into the parent's trace; its metrics start at zero.
  def test_fork_during_a_trace_and_with_metrics
    Dir.mktmpdir("gvlscope-fork") do |dir|
      path = File.join(dir, "parent.gvl")
      out, err, status = run_ruby(<<~RUBY, timeout: 60)
        require "gvlscope"
        GVLScope::Metrics.enable
        4.times.map { Thread.new { sleep 0.01 } }.each(&:join)
        GVLScope.start(#{path.inspect})
        busy = Thread.new { 5.times { sleep 0.001 } }
        reader, writer = IO.pipe
        pid = fork do
          reader.close
          waits = GVLScope::Metrics.snapshot.waits
          Thread.new { sleep 0.001 }.join
          writer.puts [GVLScope.tracing?, waits, GVLScope::Metrics.snapshot.threads.size].inspect
          writer.close
        end
        writer.close
        child = reader.read
        Process.wait(pid)
        busy.join
        GVLScope.stop
        puts child
        puts $?.success?
        require #{File.join(ROOT, "test/support/whole_trace").inspect}
        puts GVLScope::Model::TraceFile.read(#{path.inspect}).thread_info.values.count { |t| !t.main }
      RUBY
      assert status.success?, err
      child, child_ok, parent_threads = out.lines.map(&:chomp)
      tracing, waits, threads = eval(child) # rubocop:disable Security/Eval
      refute tracing, "the child does not inherit the trace"
      assert_equal 0, waits, "the child's metrics start at zero"
      assert_operator threads, :<=, 2
      assert_equal "true", child_ok
      assert_operator parent_threads.to_i, :>=, 1
    end
  end
end
