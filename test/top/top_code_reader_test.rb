# frozen_string_literal: true

require_relative "../test_helper"
require "gvlscope/top/code_reader"
require "gvlscope/live"
require "gvlscope/formats/top_text"
require "tmpdir"

# Code locations for `gvlscope top` from a trace with stacks (test/fixtures/traces/hog.gvl: a
# "counter" thread spinning in Counter#spin while the main thread joins it), and how a frame
# shows them.
class TopCodeReaderTest < Minitest::Test
  TRACES = File.join(GVLScopeTestHelper::ROOT, "test/fixtures/traces")

  def test_holders_and_release_sites_per_thread_serial
    reader = GVLScope::Top::CodeReader.new
    codes = reader.codes(File.join(TRACES, "hog.gvl"))
    assert_equal({ "released_at" => "`Thread#join` at hog.rb:24" }, codes[1])
    assert_equal "`Counter#spin` (hog.rb:8)", codes[2]["holding"]
    assert_equal "code: from the trace hog.gvl since it began", reader.note
  end

  def test_a_trace_without_stacks_says_so
    reader = GVLScope::Top::CodeReader.new
    assert_empty reader.codes(File.join(TRACES, "convoy.gvl"))
    assert_match(/has no stacks/, reader.note)
  end

  def test_a_trace_past_the_limit_is_not_read_again
    reader = GVLScope::Top::CodeReader.new(max_bytes: 100)
    assert_empty reader.codes(File.join(TRACES, "hog.gvl"))
    assert_match(/passed 0 MB; locations as of then/, reader.note)
  end

  def test_a_trace_being_written_is_read_up_to_its_last_whole_chunk_or_waited_for
    Dir.mktmpdir("gvlscope-code") do |dir|
      path = File.join(dir, "t.gvl")
      File.binwrite(path, File.binread(File.join(TRACES, "hog.gvl"), 200)) # the header and little more
      reader = GVLScope::Top::CodeReader.new
      assert_empty reader.codes(path)
      refute_nil reader.note
    end
  end

  def test_a_frame_shows_the_holders_code_and_the_waiters_release_site
    row = lambda do |serial, label, run, wait, code|
      GVLScope::Live::Snapshot::ThreadRow.new(serial: serial, label: label, ractor_id: 1, state: :wait, exited: false,
                                              run_ns: run, wait_ns: wait, idle_ns: 0, gc_ns: 0, holds: 1, waits: 1,
                                              longest_hold_ns: run, longest_wait_ns: wait, released_blocking: 1,
                                              released_preempted: 0, released_exit: 0, code: code)
    end
    threads = [row.call(1, "main", 0, 900_000_000, { "released_at" => "`Thread#join` at hog.rb:24", "at" => "join (hog.rb:24)" }),
               row.call(2, "counter", 950_000_000, 0, { "holding" => "`Counter#spin` (hog.rb:8)", "at" => "spin (hog.rb:8) 3/3" })]
    snapshot = GVLScope::Live::Snapshot.new(source: "socket", pid: 1, time_ns: 1, wall_ns: 1_000_000_000, interval_ns: 1_000_000_000,
                                            held_ns: 950_000_000, wait_ns: 900_000_000, threads: threads)
    frame = GVLScope::Formats::TopText::Frame.new(snapshot: snapshot, target: "pid 1", sort: "wait", paused: false,
                                                  findings: [], keys: false, note: nil, clock: "12:00:00")
    text = GVLScope::Formats::TopText.new(frame).to_s
    assert_match(/^main .* `Thread#join` at hog\.rb:24$/, text)
    assert_match(/^counter .* `Counter#spin` \(hog\.rb:8\)$/, text)
    assert_includes text, "top holders: 'counter' 95% in `Counter#spin` (hog.rb:8)\n"
    assert_includes text, "top waiters: 'main' 900 ms in 1 wait after `Thread#join` at hog.rb:24\n"
  end
end
