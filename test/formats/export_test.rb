# frozen_string_literal: true

require "test_helper"
require "gvlscope/model"
require "gvlscope/formats/chrome_json"
require "gvlscope/formats/perfetto"
require "json"
require "tmpdir"

# Round trips: native -> Chrome JSON parsed back; native -> .pftrace decoded by protoc against
# Perfetto's own schema.
class ExportTest < Minitest::Test
  include GVLScopeTestHelper

  DESCRIPTOR = File.expand_path("../../../shared/perfetto/perfetto_trace.desc", __dir__)

  def setup
    @dir = Dir.mktmpdir("gvlscope-export")
    @path = File.join(@dir, "t.gvl")
    reader, writer = IO.pipe
    GVLScope.trace(@path) do
      thread = Thread.new { reader.read(1) }
      thread.name = "reader ünïcode"
      sleep 0.02
      writer.write("x")
      thread.join
    end
    [reader, writer].each(&:close)
    @timeline = GVLScope::Model.timeline(@path)
  end

  def teardown
    FileUtils.rm_rf(@dir)
  end

  def test_chrome_json_round_trip
    json = JSON.parse(GVLScope::Formats::ChromeJSON.new(@timeline).write(+"").to_s)
    events = json.fetch("traceEvents")
    slices = events.select { |e| e["ph"] == "X" && e["cat"].nil? }
    assert_equal @timeline.threads.values.sum { |t| t.intervals.size }, slices.size
    names = events.select { |e| e["name"] == "thread_name" }.map { |e| e.dig("args", "name") }
    # This test's reader: the last of that name (an earlier test's, exited, may be in the trace too,
    # and then each label has its " #serial")
    tids = events.select { |e| e["name"] == "thread_name" && e.dig("args", "name").start_with?("reader ünïcode") }
    reader_name, reader_tid = tids.map { |e| [e.dig("args", "name"), e["tid"]] }.max_by { |_name, tid| tid }
    assert_match(/\Areader ünïcode( #\d+)? \(.*test\/formats\/export_test\.rb:\d+\)\z/, reader_name, "a named thread and where it was created")
    assert_includes names, "main"
    reader_states = slices.select { |e| e["tid"] == reader_tid }.sort_by { |e| e["ts"] }.map { |e| e["name"] }
    # The read's idle is "io" when its release site was recorded (it is while another thread
    # waits for the GVL, as the main one may on a busy machine), else "io/sleep".
    assert_includes ["idle (io)", "idle (io/sleep)"], reader_states[3], reader_states.inspect
    assert_equal ["started", "wait", "run", reader_states[3], "wait", "run", "exited"], reader_states
    assert events.any? { |e| e["ph"] == "C" }, "a counter of threads waiting for the GVL"
  end

  def test_perfetto_decodes_against_the_real_schema
    skip "protoc not installed (apt-get install protobuf-compiler)" unless system("command -v protoc >/dev/null")
    skip "no #{DESCRIPTOR}" unless File.exist?(DESCRIPTOR)

    pftrace = File.join(@dir, "t.pftrace")
    File.open(pftrace, "wb") { |io| GVLScope::Formats::Perfetto.new(@timeline).write(io) }
    text, err, status = Open3.capture3("protoc", "--decode=perfetto.protos.Trace", "--descriptor_set_in=#{DESCRIPTOR}",
                                       stdin_data: File.binread(pftrace), binmode: true)
    assert status.success?, err
    begins = text.scan("type: TYPE_SLICE_BEGIN").size
    ends = text.scan("type: TYPE_SLICE_END").size
    # The native-thread view appears only when Ruby and native threads are not one-to-one.
    running_intervals = if @timeline.shared_native_threads?
                          @timeline.threads.values.sum { |t| t.intervals.count { |i| i.state == :run && i.native } }
                        else
                          0
                        end
    assert_equal @timeline.threads.values.sum { |t| t.intervals.size } + running_intervals, begins
    assert_equal begins, ends
    assert_match(/thread_name: "reader \\303\\274n\\303\\257code( #\d+)? \(.*test\/formats\/export_test\.rb:\d+\)"/, text)
    assert_match(/name: "idle \(io\/sleep\)"/, text)
    assert_includes text, 'name: "threads waiting for the GVL"'
    assert_includes text, "type: TYPE_COUNTER"
  end

  def test_cli_export_and_summary
    out, err, status = Open3.capture3(RbConfig.ruby, File.join(ROOT, "exe/gvlscope"), "export", @path, "--format", "chrome-json")
    assert status.success?, err
    assert JSON.parse(File.read(@path.sub(/\.gvl\z/, ".json"), encoding: "UTF-8"))["traceEvents"].any?
    out, err, status = Open3.capture3(RbConfig.ruby, File.join(ROOT, "exe/gvlscope"), "summary", @path)
    assert status.success?, err
    out.force_encoding(Encoding::UTF_8) # whatever the locale (CI may run without LANG): names are UTF-8
    assert_match(/GVL held \d+\.\d% of the time/, out)
    assert_match(/reader ünïcode/, out)
    _out, err, status = Open3.capture3(RbConfig.ruby, File.join(ROOT, "exe/gvlscope"), "export", @path, "--format", "svg")
    assert_equal 2, status.exitstatus
    assert_match(/invalid argument: --format svg/, err)
    _out, err, status = Open3.capture3(RbConfig.ruby, File.join(ROOT, "exe/gvlscope"), "summary", File.join(@dir, "nope.gvl"))
    assert_equal 1, status.exitstatus
    assert_match(/no such file/, err)
  end
end
