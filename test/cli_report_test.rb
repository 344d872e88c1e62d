# frozen_string_literal: true

require "test_helper"
require "tmpdir"
require "json"

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
        out, err, status = gvlscope("report", trace, "--html", File.join(dir, "r.html"))
        assert status.success?, err
        assert_match(/^bad\u{fffd}name /, out.force_encoding("UTF-8"))
        assert_includes File.read(File.join(dir, "r.html")), "bad\u{fffd}name"
        { "chrome-json" => "c.json", "perfetto" => "p.pftrace", "speedscope" => "s.json" }.each do |format, name|
          _out, err, status = gvlscope("export", trace, "--format", format, "-o", File.join(dir, name))
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
      assert_match(/^GVL hold time \(us\)$/, out)

      out, err, status = gvlscope("report", "--json", "--thread", "sleeper", path)
      assert status.success?, err
      data = JSON.parse(out)
      assert_equal ["sleeper"], data["threads"].map { |t| t["name"] }
      assert_operator data["threads"].first["idle_ns"], :>=, 10_000_000 # it slept 10 ms

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

  def test_a_truncated_trace_is_an_error_unless_partial
    with_trace do |path, dir|
      cut = File.join(dir, "cut.gvl")
      data = File.binread(path)
      File.binwrite(cut, data[0, data.bytesize - 30])
      out, err, status = gvlscope("report", cut)
      assert_equal 1, status.exitstatus
      assert_equal "", out
      assert_equal 1, err.lines.size, err
      assert_match(/cut\.gvl: truncated .*--partial/, err)
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
