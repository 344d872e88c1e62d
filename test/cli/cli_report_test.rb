# frozen_string_literal: true

require "test_helper"
require "tmpdir"
require "json"
require "gvlscope/model"
require "gvlscope/formats/report_html"
require "support/reference_timeline"

# `gvlscope report`: text, JSON and HTML of a trace, gvl-tracing traces, and one clear line
# (no backtrace) for every kind of bad input.
class CLIReportTest < Minitest::Test
  include GVLScopeTestHelper

  GVL_TRACING_FIXTURE = File.join(ROOT, "test/fixtures/traces/gvl-tracing-1.7.0.json") # written by gvl-tracing 1.7.0

  def with_trace
    Dir.mktmpdir("gvlscope-cli-report") do |dir|
      path = File.join(dir, "t.gvl")
      _out, err, status = run_ruby(<<~RUBY, path)
        require "gvlscope"
        GVLScope.trace(ARGV[0]) { Thread.new { Thread.current.name = "sleeper"; sleep 0.01 }.join }
      RUBY
      assert status.success?, err
      yield path, dir
    end
  end

  # Ruby accepts any bytes as a thread name; every output still works, with the bad bytes as U+FFFD
  # (in a .gvl trace and in a gvl-tracing one).
  def test_a_thread_name_that_is_not_utf8
    Dir.mktmpdir("gvlscope-cli-report") do |dir|
      path = File.join(dir, "t.gvl")
      _out, err, status = run_ruby(<<~'RUBY', path)
        require "gvlscope"
        GVLScope.trace(ARGV[0]) { Thread.new { Thread.current.name = "bad\xffname".b.force_encoding("UTF-8"); sleep 0.01 }.join }
      RUBY
      assert status.success?, err
      json = File.join(dir, "gvl-tracing.json")
      File.write(json, JSON.generate([
        { ph: "M", pid: 1, tid: 5, name: "thread_name", args: { name: "x" } },
        { ph: "B", pid: 1, tid: 5, ts: 1.0, name: "started" }, { ph: "B", pid: 1, tid: 5, ts: 2.0, name: "running" },
      ]).sub('"x"', "\"bad\xffname\"".b))
      [path, json].each do |trace|
        out, err, status = gvlscope("report", "--json", trace)
        assert status.success?, err
        assert_includes JSON.parse(out)["threads"].map { |t| t["name"] }, "bad\u{fffd}name", trace
        out, err, status = gvlscope("report", trace, "--html", File.join(dir, "r.html"), "--force") # both traces
        assert status.success?, err
        assert_match(/^bad\u{fffd}name /, out.force_encoding("UTF-8"))
        assert_includes File.read(File.join(dir, "r.html")), "bad\u{fffd}name"
        { "chrome-json" => "c.json", "perfetto" => "p.pftrace", "speedscope" => "s.json" }.each do |format, name|
          _out, err, status = gvlscope("export", trace, "--format", format, "-o", File.join(dir, name), "--force") # both traces
          assert status.success?, "#{format}: #{err}"
        end
        names = JSON.parse(File.read(File.join(dir, "c.json")))["traceEvents"].map { |e| e.dig("args", "name") }
        assert(names.compact.any? { |name| name.start_with?("bad\u{fffd}name") }, names.inspect) # + " (-e:2)", where created
        assert_includes File.read(File.join(dir, "s.json")), "bad\u{fffd}name"
      end
    end
  end

  def test_text_json_and_thread_filter
    with_trace do |path, dir|
      out, err, status = gvlscope("report", path)
      assert status.success?, err
      assert_match(/^GVL held .* of the time; threads waited/, out)
      assert_match(/^No findings/, out)
      assert_match(/^sleeper /, out)
      assert_match(/^GVL hold time$/, out)

      out, err, status = gvlscope("report", "--json", "--thread", "sleeper", path)
      assert status.success?, err
      data = JSON.parse(out)
      assert_equal ["sleeper"], data["threads"].map { |t| t["name"] }
      # It slept 10 ms: off the GVL that long, idle (on a loaded machine part of it may read as a
      # wait: a sleep woken early goes back to sleep, and the release rule can take a return for
      # a preemption: docs/format.md).
      sleeper = data["threads"].first
      assert_operator sleeper["idle_ns"] + sleeper["wait_ns"], :>=, 10_000_000, sleeper.inspect

      _out, err, status = gvlscope("report", "--thread", "nobody", path)
      assert_equal 1, status.exitstatus
      assert_match(/no thread named "nobody".*threads: .*sleeper/, err)

      html = File.join(dir, "r.html")
      _out, err, status = gvlscope("report", "--html", html, path)
      assert status.success?, err
      assert_match(/<canvas id="timeline">/, File.read(html))
    end
  end

  def test_reads_gvl_tracing_traces
    out, err, status = gvlscope("report", "--json", GVL_TRACING_FIXTURE)
    assert status.success?, err
    data = JSON.parse(out)
    names = data["threads"].map { |t| t["name"] }.sort
    assert_equal ["cpu", "main", "thread 2"], names
    cpu = data["threads"].find { |t| t["name"] == "cpu" }
    # The fixture's cpu thread ran ~105 ms, preempted once at the end of its timeslice.
    assert_in_delta 109.0e6, cpu["run_ns"], 1e6
    assert_equal 1, cpu["released_by"]["preempted"]
    main = data["threads"].find { |t| t["name"] == "main" }
    assert_operator main["gc_ns"], :>, 0 # the fixture ends with GC.start
    assert_in_delta 141.99e6, data["duration_ns"], 0.1e6

    out, err, status = gvlscope("summary", GVL_TRACING_FIXTURE)
    assert status.success?, err
    assert_match(/^cpu /, out)
  end

  def test_bad_input_is_one_clear_line_and_a_non_zero_exit
    Dir.mktmpdir("gvlscope-bad") do |dir|
      text = File.join(dir, "notes.txt").tap { |p| File.write(p, "hello\n") }
      empty = File.join(dir, "empty.gvl").tap { |p| File.write(p, "") }
      json = File.join(dir, "other.json").tap { |p| File.write(p, %([{"ph":"X","name":"foo","ts":1}])) }
      broken_json = File.join(dir, "broken.json").tap { |p| File.write(p, %([{"ph":"B","name":"running")) }
      cases = {
        File.join(dir, "missing.gvl") => /no such file/,
        dir => /is a directory/,
        text => /not a gvlscope trace/,
        empty => /empty file/,
        json => /not a gvl-tracing trace/,
        broken_json => /not valid JSON/,
      }
      cases.each do |path, message|
        out, err, status = gvlscope("report", path)
        assert_equal 1, status.exitstatus, "#{path}: #{err}"
        assert_equal "", out
        assert_equal 1, err.lines.size, "#{path}: one line expected, got:\n#{err}"
        assert_match message, err
      end
      _out, err, status = gvlscope("report", "--debug", text)
      refute status.success?
      assert_match(/trace_file\.rb:\d+/, err, "--debug shows the backtrace")
    end
  end

  # `--html OUT --window FROM..TO`: a page whose intervals are every one of that range (one pass
  # of the engine), the same the plain Ruby reference has there, and the overview elsewhere; a bad range
  # is one line and exit 1 (before the trace is read, when it does not parse).
  def test_html_window_holds_every_interval_of_the_range_and_bad_ranges_are_one_line
    trace = File.join(ROOT, "test/fixtures/traces/hog.gvl")
    Dir.mktmpdir("gvlscope-cli-window") do |dir|
      html = File.join(dir, "w.html")
      out, err, status = gvlscope("report", trace, "--html", html, "--window", "250..400.5ms")
      assert status.success?, err
      assert_match(/^Findings/, out) # the text report, as with --html alone
      assert_equal "gvlscope: wrote #{html}\n", err
      page_data = -> { JSON.parse(File.read(html)[/^const REPORT = (.*);$/, 1].gsub("<\\/", "</")) }
      data = page_data.call
      from, to = 250_000_000, 400_500_000
      assert_equal ["windows", [[from, to]], [from, to], 2000],
                   data["timeline"].values_at("mode", "windows", "asked", "bins"), "the range, and the overview"
      timeline = ReferenceTimeline.open(trace)
      unit = data["unitNs"]
      codes = GVLScope::Formats::ReportHTML::CODES
      expected = timeline.threads.values.to_h do |thread|
        inside = thread.intervals.select { |i| i.start_ns < to && (i.end_ns > from || i.start_ns >= from) }
        [thread.serial, inside.map { |i| [i.state == :idle ? (i.reason || :unknown) : i.state, i.start_ns / unit, i.end_ns / unit] }]
      end
      assert_operator expected.values.sum(&:size), :>, 5, "the range holds intervals"
      shown = data["threads"].to_h do |lane|
        last_end = 0
        times = lane["times"].unpack1("m0").unpack("w*").each_slice(2).map do |gap, length|
          start = last_end + gap
          last_end = start + length
          [start, last_end]
        end
        states = lane["codes"].unpack1("m0").unpack("C*").map { |code| codes.key(code) }
        [lane["serial"], states.zip(times).map(&:flatten)]
      end
      assert_equal expected, shown
      assert_equal expected.values.sum(&:size), data["timeline"]["intervals"]

      # Its end past the trace's: cut to the trace's end.
      _out, err, status = gvlscope("report", trace, "--html", html, "--window", "1s..30s", "--force") # the page above, again
      assert status.success?, err
      assert_equal [[1_000_000_000, timeline.duration_ns]], page_data.call["timeline"]["windows"]

      File.delete(html)
      {
        "2s..1s" => "gvlscope: --window 2s..1s: the range is empty or reversed (FROM must be before TO)",
        "5ms..5ms" => "gvlscope: --window 5ms..5ms: the range is empty or reversed (FROM must be before TO)",
        "20s..21s" => "gvlscope: --window 20s..21s: starts after the trace ended (it lasts 1.10087s)",
        "1.5" => %(gvlscope: --window "1.5": not a time range: give FROM..TO since the trace began, with a unit (ns, us, ms or s), e.g. 12.5s..12.7s or 300..450ms),
        "1s..2" => %(gvlscope: --window "1s..2": not a time range: give FROM..TO since the trace began, with a unit (ns, us, ms or s), e.g. 12.5s..12.7s or 300..450ms),
        "-1s..2s" => %(gvlscope: --window "-1s..2s": not a time range: give FROM..TO since the trace began, with a unit (ns, us, ms or s), e.g. 12.5s..12.7s or 300..450ms),
      }.each do |range, line|
        out, err, status = gvlscope("report", trace, "--html", html, "--window", range)
        assert_equal [1, "#{line}\n", ""], [status.exitstatus, err, out], range
        refute File.exist?(html), "#{range}: no page"
      end
      _out, err, status = gvlscope("report", trace, "--window", "1s..2s")
      assert_equal 2, status.exitstatus
      assert_match(/\Agvlscope: --window chooses the HTML's intervals: it goes with --html OUT \(see gvlscope report --help\)\n\z/, err)
    end
  end

  def test_a_truncated_trace_is_an_error_unless_partial
    with_trace do |path, dir|
      cut = File.join(dir, "cut.gvl")
      data = File.binread(path)
      File.binwrite(cut, data[0, data.bytesize - 30])
      out, err, status = gvlscope("report", cut)
      assert_equal 1, status.exitstatus
      assert_equal "", out
      assert_equal 1, err.lines.size, err
      assert_match(/cut\.gvl: ended without an end record \(the process was killed or exec.d, or the file was cut\); --partial/, err)
      out, err, status = gvlscope("report", "--partial", cut)
      assert status.success?, err
      assert_match(/warning: .*file ends inside a chunk/, err)
      assert_match(/truncated/, out.lines.first)
    end
  end

  def test_every_command_answers_help
    %w[run report export summary].each do |command|
      out, err, status = gvlscope(command, "--help")
      assert status.success?, err
      assert_match(/\AUsage: gvlscope #{command}/, out)
    end
    _out, err, status = gvlscope("report", "a.gvl", "b.gvl")
    assert_equal 2, status.exitstatus
    assert_match(/report takes one FILE/, err)
  end
end
