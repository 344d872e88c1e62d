# frozen_string_literal: true

require "test_helper"
require "tmpdir"
require "json"
require "objspace"
require "gvlscope/analysis"
require "gvlscope/formats"
require "support/synthetic_gvl_tracing"

# gvl-tracing JSON read by the report engine (Model::Scan.read -> GVLTracing.index): streamed, one
# line at a time, into a temporary .gvl file the engine analyses like any trace. The same events,
# threads and outputs as the whole-file import (GVLTracing.read, what Model.read and the tests'
# reference use), memory that does not grow with the events, no temporary file left behind.
class GVLTracingStreamTest < Minitest::Test
  include GVLScopeTestHelper

  FIXTURE = File.join(ROOT, "test/fixtures/traces/gvl-tracing-1.7.0.json")
  Stream = GVLScope::Model::GVLTracing::Stream

  def setup
    @dir = Dir.mktmpdir("gvlscope-stream")
    @tmpdir = Dir.mktmpdir("gvlscope-stream-tmp")
    @old_tmpdir = ENV.fetch("TMPDIR", nil)
    ENV["TMPDIR"] = @tmpdir # the temporary .gvl files go here: the tests see them
  end

  def teardown
    ENV["TMPDIR"] = @old_tmpdir
    FileUtils.rm_rf(@dir)
    FileUtils.rm_rf(@tmpdir)
  end

  # The recorded fixture, and a generated trace with ties across threads, GC inside holds, events
  # written out of time order and the OS threads view (pid 0): streamed, never read whole, and
  # every output is the whole-file import's, byte for byte.
  def test_a_streamed_import_has_the_events_and_outputs_of_the_whole_file_import
    generated = File.join(@dir, "generated.json")
    SyntheticGvlTracing.write(generated, events: 30_000, os_view: true)
    [FIXTURE, generated].each do |path|
      name = File.basename(path)
      gvl_path, pid, thread_info = Stream.new(path).convert
      refute_nil gvl_path, "#{name}: streamed"
      whole = GVLScope::Model::GVLTracing.read(path)
      converted = GVLScope::Model::TraceFile.read(gvl_path)
      File.unlink(gvl_path)
      assert_equal whole.pid, pid
      %i[times kinds threads natives end_ns].each do |field|
        assert_equal whole.public_send(field), converted.public_send(field), "#{name}: #{field}"
      end
      assert_equal whole.thread_info, thread_info, name

      old = outputs(GVLScope::Model::Scan.new(GVLScope::Model::GVLTracing.read(path)).run)
      new = outputs(GVLScope::Model::Scan.open(path, spill: true))
      assert_equal old.keys, new.keys
      old.each { |format, output| assert output == new[format], "#{name}: #{format} differs from the whole-file import" }
    end
    assert_empty Dir.children(@tmpdir), "temporary files left"
  end

  # The engine's bytes and the Ruby memory kept while the report is made do not grow with the
  # events: a trace 4 times longer costs the same (the whole-file import kept every event twice,
  # as Ruby Arrays and in the engine's imported index: some 40 bytes an event, 12 MB more here).
  def test_memory_does_not_grow_with_the_events
    small = File.join(@dir, "small.json")
    large = File.join(@dir, "large.json")
    small_events = SyntheticGvlTracing.write(small, events: 100_000)
    large_events = SyntheticGvlTracing.write(large, events: 400_000)
    small_bytes, small_kept = measure(small)
    large_bytes, large_kept = measure(large)
    # Slack: one chunk's records (8192 x 16 bytes) more open at once, where a tie split a chunk.
    assert_operator large_bytes, :<=, small_bytes + 160 * 1024,
                    "engine bytes: #{small_bytes} for #{small_events} events, #{large_bytes} for #{large_events}"
    assert_operator large_kept, :<=, small_kept + 256 * 1024,
                    "Ruby bytes kept: #{small_kept} for #{small_events} events, #{large_kept} for #{large_events}"
    assert_empty Dir.children(@tmpdir), "temporary files left"
  end

  # JSON not laid out as gvl-tracing writes it (here all on one line) is read whole, as before,
  # up to a size; beyond it, one line says why.
  def test_json_laid_out_otherwise_is_read_whole_up_to_a_size
    path = File.join(@dir, "one-line.json")
    File.write(path, JSON.generate(JSON.parse(File.read(FIXTURE))))
    assert_nil Stream.new(path).convert
    assert_equal GVLScope::Model::GVLTracing.read(path).times, GVLScope::Model::GVLTracing.index(path).times
    error = assert_raises(GVLScope::FormatError) { GVLScope::Model::GVLTracing.index(path, whole_file_bytes: 1024) }
    assert_equal "#{path}: a 0 MB JSON file not laid out as gvl-tracing writes it (one event a line, in time order): " \
                 "gvlscope reads such a file whole, up to 0 MB", error.message
    assert_empty Dir.children(@tmpdir), "temporary files left"
  end

  # An event further out of time order than the reorder window: read whole, the same events.
  def test_an_event_far_out_of_order_reads_the_whole_file
    path = File.join(@dir, "late.json")
    SyntheticGvlTracing.write(path, events: 3 * Stream::REORDER_WINDOW)
    lines = File.readlines(path)
    late = lines.index { |line| line.include?('"name": "wants_gvl"') }
    lines.insert(lines.size - 6, lines.delete_at(late)) # among the died events
    File.write(path, lines.join)
    assert_nil Stream.new(path).convert
    assert_empty Dir.children(@tmpdir), "temporary files left"
    whole = GVLScope::Model::GVLTracing.read(path)
    assert_equal whole.times.size, GVLScope::Model::Scan.open(path).file.size
  end

  # Broken files laid out line by line: the same one-line errors as the whole-file import gives.
  def test_broken_files_give_the_whole_file_imports_errors
    lines = File.readlines(FIXTURE)
    broken = {
      "cut.json" => lines[0, 40].join,
      "tid.json" => lines.join.sub('"tid": 1, "ts": 55.572002, "name"', '"tid": -4, "ts": 55.572002, "name"'),
      "ts.json" => lines.join.sub('"ts": 55.572002, "name"', '"ts": "x", "name"'),
      "no-states.json" => "[\n" + lines.grep(/"ph": "[EM]"/).join.sub(/,\n\z/, "\n") + "]\n",
      "bytes.json" => lines.join.sub('"name": "cpu"', "\"name\": \"c\xffu\"".b),
    }
    broken.each do |name, data|
      path = File.join(@dir, name)
      File.binwrite(path, data)
      expected = assert_raises(GVLScope::FormatError, name) { GVLScope::Model::GVLTracing.read(path) }.message unless name == "bytes.json"
      begin
        file = GVLScope::Model::Scan.read(path)
        assert_equal "bytes.json", name, "#{name}: read"
        assert_equal GVLScope::Model::GVLTracing.read(path).thread_info, file.thread_info
      rescue GVLScope::FormatError => e
        assert_equal expected, e.message, name
      end
    end
    assert_empty Dir.children(@tmpdir), "temporary files left"
  end

  private

  # [peak bytes of the engine, bytes of Ruby objects alive] once the report of +path+ is made.
  # -> [the engine's peak bytes, the bytes of the Ruby objects the scan and its report keep]. Not
  # the whole heap's growth: the GC scans stacks conservatively, so a stale pointer may keep or
  # let go of anything (an earlier test's objects, the other measurement's scan) at either end,
  # by a megabyte either way.
  def measure(path)
    # Medians exact up to 10,000 waits (a histogram beyond), as in engine_test.rb: the default
    # budget keeps every wait of a trace this small.
    scan = GVLScope::Model::Scan.new(GVLScope::Model::Scan.read(path), exact_medians: 10_000).run
    report = GVLScope::Analysis::Report.new(scan)
    GVLScope::Formats::ReportText.new(report).to_s
    [scan.peak_bytes, reachable_bytes(scan, report)]
  end

  # Bytes of the Ruby objects reachable from +roots+; code (classes, modules, CRuby's internal
  # objects) is not counted.
  def reachable_bytes(*roots)
    seen = {}.compare_by_identity
    total = 0
    until roots.empty?
      object = roots.pop
      next if object.is_a?(Module) || object.is_a?(ObjectSpace::InternalObjectWrapper) || seen.key?(object)

      seen[object] = true
      total += ObjectSpace.memsize_of(object)
      roots.concat(ObjectSpace.reachable_objects_from(object) || [])
    end
    total
  end

  # Every export, the summary and every report of +timeline+ (a Scan), by format.
  def outputs(timeline)
    report = GVLScope::Analysis::Report.new(timeline)
    made = {}
    GVLScope::Formats.for_command("export").each do |entry|
      made[entry.name] = entry.format_class.new(timeline).to_s.b unless entry.stacks
    end
    made[:summary] = GVLScope::Formats::SummaryText.new(timeline).to_s
    GVLScope::Formats.for_command("report").each { |entry| made[entry.name] = entry.format_class.new(report).to_s }
    made
  end
end
