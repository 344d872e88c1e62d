# frozen_string_literal: true

require "test_helper"
require "tempfile"

# When the writer cannot keep up, events are dropped and counted: in the summary, in the chunk
# headers and in the end record. A pipe nobody reads stalls the writer on purpose.
class DropTest < Minitest::Test
  def test_a_stalled_writer_drops_events_and_counts_them
    reader, writer = IO.pipe
    # The writer opens the pipe by path: its 64 KiB buffer fills, write(2) blocks, chunks pile up
    # until the 1 MiB of buffers is full, and from then on events are dropped.
    GVLScope.start("/dev/fd/#{writer.fileno}", buffer_bytes: 1 << 20)
    calls = 200_000
    File.open("/dev/zero") { |zero| calls.times { zero.sysread(16) } }
    drained = +""
    drain = Thread.new { drained << reader.read }
    summary = GVLScope.stop
    writer.close
    drain.join

    assert_operator summary.dropped, :>, 0
    assert_operator summary.events, :>, 0
    # Every sysread is 3 events; the others (a few hundred) are the drain thread's pipe reads,
    # 3 events each, while stop waits for the writer.
    assert_includes (3 * calls)..(3 * calls + 2_000), summary.events + summary.dropped

    file = Tempfile.new(["dropped", ".gvl"])
    file.binmode
    file.write(drained)
    file.close
    trace = GVLScope::Model::TraceFile.read(file.path)
    refute trace.truncated?
    assert_equal summary.dropped, trace.dropped
    assert_equal summary.events, trace.records
  ensure
    GVLScope.stop if GVLScope.tracing?
    [reader, writer].each { |io| io.close unless io.closed? }
  end
end
