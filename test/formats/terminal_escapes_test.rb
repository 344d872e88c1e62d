# frozen_string_literal: true

require_relative "../test_helper"
require "tmpdir"
require "json"
require "gvlscope/support/printable"

# A thread name, a path or an argument holding terminal control sequences (window title, screen
# clear, clipboard) reaches the terminal as visible escapes, never as the sequence itself.
class TerminalEscapesTest < Minitest::Test
  include GVLScopeTestHelper

  # OSC 0 (title), CSI 2J (clear), OSC 52 (clipboard), and C1 CSI.
  HOSTILE = "\e]0;pwned\a\e[2J\e]52;c;cHduZWQ=\a\u009b2J"
  SHOWN = '\e]0;pwned\a\e[2J\e]52;c;cHduZWQ=\a\u009B2J'
  # The right-to-left override (U+202E) turns what follows around ("Trojan Source"); the other
  # bidi controls embed or isolate text the same way.
  BIDI_NAME = "invoice\u202Efdp.exe\u2066x\u2069"
  BIDI_SHOWN = 'invoice\u202Efdp.exe\u2066x\u2069'
  CONTROL = /[\x00-\x08\x0b-\x1f\x7f\u0080-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/

  def test_control_characters_are_shown_as_escapes
    assert_equal SHOWN, GVLScope::Printable.text(HOSTILE)
    assert_equal BIDI_SHOWN, GVLScope::Printable.text(BIDI_NAME)
    assert_equal 'a\u200Fb\u061Cc\u202Ad', GVLScope::Printable.text("a\u200Fb\u061Cc\u202Ad")
    assert_equal 'a\nb\tc', GVLScope::Printable.text("a\nb\tc")
    assert_equal "a\nb\tc\\e", GVLScope::Printable.message("a\nb\tc\e")
    assert_equal "\u00e9t\u00e9 \u2603 \uFFFD", GVLScope::Printable.text("\u00e9t\u00e9 \u2603 \xff".b)
  end

  def assert_printable(text, where)
    refute_match(CONTROL, text.dup.force_encoding(Encoding::UTF_8).scrub, "#{where} holds a control character")
  end

  def test_a_hostile_thread_name_in_report_and_summary
    Dir.mktmpdir("gvlscope-escapes") do |dir|
      trace = File.join(dir, "t.gvl")
      trace_program(trace, "GVLWorkloads.cpu_beside_reader(#{HOSTILE.inspect}, 4)")
      %w[report summary].each do |command|
        out, err, status = gvlscope(command, trace)
        assert status.success?, err
        assert_printable(out, "#{command}'s output")
        assert_printable(err, "#{command}'s errors")
        assert_includes out, SHOWN[0, 30], "#{command} shows the thread's name, escaped (a long label is cut in its middle)"
      end
    end
  end

  # A bidi override in a thread's name reaches every text output of a trace escaped: the report,
  # the summary, the Markdown report and the diff.
  def test_a_bidi_override_in_a_thread_name_in_every_text_output
    Dir.mktmpdir("gvlscope-escapes") do |dir|
      trace = File.join(dir, "t.gvl")
      trace_program(trace, "GVLWorkloads.cpu_beside_reader(#{BIDI_NAME.inspect}, 4)")
      [["report", trace], ["summary", trace], ["report", trace, "--format", "markdown"], ["diff", trace, trace]].each do |args|
        out, err, status = gvlscope(*args)
        assert status.success?, err
        assert_printable(out, "#{args.join(' ')}'s output")
        assert_includes out, BIDI_SHOWN, "#{args.join(' ')} shows the thread's name, escaped"
      end
    end
  end

  # The same in a snapshot file (`top --once --json`, edited or not): its names are shown as a
  # trace's are, by diff and advise.
  def test_a_bidi_override_in_a_snapshot_files_names
    require "gvlscope/live"
    row = GVLScope::Live::Snapshot::ThreadRow.from_h(
      { "serial" => 1, "label" => BIDI_NAME, "ractor_id" => 1, "state" => "run", "run_ns" => 900_000_000,
        "wait_ns" => 0, "idle_ns" => 100_000_000, "code" => { "at" => "`x#{HOSTILE}` (a.rb:1)" } }
    )
    snapshot = GVLScope::Live::Snapshot.new(source: "socket", pid: 1, time_ns: 1, wall_ns: 1_000_000_000,
                                            held_ns: 900_000_000, wait_ns: 0, threads: [row])
    Dir.mktmpdir("gvlscope-escapes") do |dir|
      path = File.join(dir, "snap.json")
      File.write(path, JSON.generate(snapshot.to_h))
      [["diff", path, path], ["advise", "--snapshot", path]].each do |args|
        out, err, status = gvlscope(*args)
        assert status.success?, err
        assert_printable(out, "#{args.first}'s output")
        # (advise names the pool without its numbers, quoted: "invoice\\u#E…")
        assert_match(/invoice\\+u/, out, "#{args.first} shows the thread's name, escaped")
      end
    end
  end

  def test_a_hostile_thread_name_and_command_in_top
    program = "Thread.new { Thread.current.name = #{HOSTILE.inspect}; sleep }; sleep 1.5"
    out, err, status = gvlscope("top", "--once", "--", RbConfig.ruby, "-e", program)
    assert status.success?, err
    assert_printable(out, "top's frame")
    assert_printable(err, "top's errors")
    assert_includes out, SHOWN[0, 10], "top shows the thread's name, escaped"
  end

  def test_error_messages_quoting_input
    Dir.mktmpdir("gvlscope-escapes") do |dir|
      path = File.join(dir, "#{HOSTILE}.gvl")
      File.write(path, "not a trace")
      [["report", path], ["summary", File.join(dir, "missing#{HOSTILE}.gvl")]].each do |args|
        out, err, status = gvlscope(*args)
        assert_equal 1, status.exitstatus, err
        assert_empty out
        assert_printable(err, "#{args.first}'s error")
        assert_includes err, SHOWN
        assert_equal 1, err.lines.size, err
      end
    end
  end
end
