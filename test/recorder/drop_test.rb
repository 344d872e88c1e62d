# frozen_string_literal: true

require "test_helper"
require "tmpdir"

# When the recorder's memory is exhausted, events are dropped and counted: in the summary, in the
# chunk headers and in the end record. Each recording native thread holds a 64 KiB chunk, so 40
# threads alive at once need 2.5 MiB: with 1 MiB (16 chunks) most of them find no chunk.
# (A trace is always a new regular file, never a pipe that could stall the writer.)
class DropTest < Minitest::Test
  THREADS = 40
  CALLS = 5_000

  def test_events_beyond_the_buffer_are_dropped_and_counted
    Dir.mktmpdir("gvlscope-drop") do |dir|
      path = File.join(dir, "t.gvl")
      ready = Queue.new
      go = Queue.new
      GVLScope.start(path, buffer_bytes: 1 << 20, stacks: false) # events only: the range below counts them
      threads = THREADS.times.map do
        Thread.new do
          ready << true
          go.pop # all alive, each holding (or lacking) its chunk, before any of them reads
          File.open("/dev/zero") { |zero| CALLS.times { zero.sysread(16) } }
        end
      end
      THREADS.times { ready.pop }
      THREADS.times { go << true }
      threads.each(&:join)
      summary = GVLScope.stop

      assert_operator summary.dropped, :>, 0
      assert_operator summary.events, :>, 0
      # Every sysread is 3 events; the rest (a few per thread) are starts, queue waits and exits.
      assert_includes (3 * CALLS * THREADS)..(3 * CALLS * THREADS + 50 * THREADS), summary.events + summary.dropped
      trace = GVLScope::Model::TraceFile.read(path)
      refute trace.truncated?
      assert_equal summary.dropped, trace.dropped
      assert_equal summary.events, trace.size
    end
  ensure
    GVLScope.stop if GVLScope.tracing?
  end
end
