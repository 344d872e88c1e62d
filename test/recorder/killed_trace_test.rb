# frozen_string_literal: true

require_relative "../test_helper"
require "tmpdir"

# A process killed with SIGKILL never stops its trace: whatever the drain thread wrote is all
# there is. Thread records are written as threads appear, so that partial trace is still labelled.
class KilledTraceTest < Minitest::Test
  include GVLScopeTestHelper

  def test_a_sigkilled_trace_keeps_its_thread_names
    Dir.mktmpdir do |dir|
      path = File.join(dir, "killed.gvl")
      _out, _err, status = run_ruby(<<~RUBY, path, timeout: 60)
        require "gvlscope"
        GVLScope.start(ARGV[0], stacks: false)
        pipe_io = ->(rounds) do
          r, w = IO.pipe
          rounds.times { w.write("x"); r.read(1) }  # blocking calls: SUSPENDED, READY, RESUMED each
        end
        inside = 2.times.map do |i|
          Thread.new do
            Thread.current.name = "inside-\#{i}"  # named by itself, after its first events
            pipe_io.(4000)
            sleep
          end
        end
        outside = Thread.new { pipe_io.(4000); sleep }
        outside.name = "named-from-outside"
        pipe_io.(4000)  # enough events that every lane seals full chunks the drain writes
        sleep 0.5
        Process.kill(:KILL, Process.pid)
      RUBY
      assert_equal "KILL", Signal.signame(status.termsig.to_i), "the child should have been SIGKILLed"

      file = GVLScope::Model::TraceFile.read(path)
      assert file.truncated?, "a killed process leaves no end record"
      names = file.thread_info.values.map(&:name).compact
      assert_includes names, "inside-0", "names read: #{names.inspect}"
      assert_includes names, "inside-1"
      assert_includes names, "named-from-outside"
      assert file.thread_info.values.any?(&:main), "the main thread is marked"
    end
  end
end
