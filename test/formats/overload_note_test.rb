# frozen_string_literal: true

require "test_helper"
require "tmpdir"
require "gvlscope/cli"

# Holds are wall time: on an overloaded machine they include the time the OS kept the holder off
# a CPU (issue 37: "Long hold … 7,435 ms in one stretch" at load 17). The recorder appends the
# machine's CPUs and highest 1-minute load to the end record; the report's header says when the
# load was above the CPUs. Traces written before (a 24-byte end record) read as they did.
class OverloadNoteTest < Minitest::Test
  include GVLScopeTestHelper

  FIXTURE = File.join(ROOT, "test/fixtures/traces/hog.gvl")
  NOTE = /^The machine was overloaded \(load 17\.0 on 2 CPUs\): holds include time the OS kept the holder off a CPU$/

  def test_a_trace_records_its_machine
    Dir.mktmpdir("gvlscope-overload") do |dir|
      path = File.join(dir, "t.gvl")
      GVLScope.trace(path) { Thread.new { sleep 0.001 }.join }
      machine = GVLScope::Model::TraceFile.read(path).machine
      refute_nil machine, "no machine in the end record"
      assert_equal Etc.sysconf(Etc::SC_NPROCESSORS_ONLN), machine.cpus
      assert_operator machine.load, :>=, 0
    end
  end

  def test_an_older_trace_reads_without_a_machine_and_no_note
    assert_nil GVLScope::Model::TraceFile.read(FIXTURE).machine
    out, err, status = gvlscope_in_process("report", FIXTURE)
    assert_equal 0, status, err
    refute_match(/overloaded/, out)
  end

  def test_the_report_says_when_the_machine_was_overloaded
    Dir.mktmpdir("gvlscope-overload") do |dir|
      loaded = with_machine(dir, "loaded.gvl", cpus: 2, load_milli: 17_000)
      quiet = with_machine(dir, "quiet.gvl", cpus: 2, load_milli: 1_500)
      out, err, status = gvlscope_in_process("report", loaded)
      assert_equal 0, status, err
      assert_match NOTE, out.lines[2].chomp
      markdown, = gvlscope_in_process("report", loaded, "--format", "markdown")
      assert_includes markdown, "The machine was overloaded (load 17.0 on 2 CPUs)"
      out, = gvlscope_in_process("report", quiet)
      refute_match(/overloaded/, out)
    end
  end

  private

  # A copy of the fixture whose end record (its last chunk) carries the machine.
  def with_machine(dir, name, cpus:, load_milli:)
    data = File.binread(FIXTURE)
    type, bytes = data.byteslice(-32, 8).unpack("L<L<")
    assert_equal [3, 24], [type, bytes], "the fixture ends with its end record"
    path = File.join(dir, name)
    File.binwrite(path, data.byteslice(0, data.bytesize - 32) + [3, 32].pack("L<L<") + data.byteslice(-24, 24) +
                        [cpus, load_milli].pack("L<L<"))
    path
  end
end
