# frozen_string_literal: true

require "test_helper"
require "stringio"
require "tmpdir"
require "fileutils"
require "gvlscope/cli"
require "gvlscope/formats/report_html"

# Issue 37: no command destroys or silently replaces a file it did not create. Every output path
# (report --html, export, run --html/--format, lab run/all traces and --write, top --log) follows
# GVLScope::OutputFile: an existing file only with --force, never the command's own input however
# it is spelled, written beside the path and renamed into place, and a failure removes only the
# temporary file. Before: `report t.gvl --html t.gvl` deleted the trace, and `report --html` over
# an existing file replaced it with exit 0.
class CLIOutputTest < Minitest::Test
  include GVLScopeTestHelper

  FIXTURE = File.join(ROOT, "test/fixtures/traces/convoy.gvl")

  def setup
    @dir = Dir.mktmpdir("gvlscope-output")
    @trace = File.join(@dir, "t.gvl")
    FileUtils.cp(FIXTURE, @trace)
    @trace_bytes = File.binread(@trace)
  end

  def teardown
    FileUtils.rm_rf(@dir)
  end

  # The input (given as t.gvl, run in its directory) as the same path, ./path, its absolute path,
  # a symlink and a hard link to it.
  def spellings
    File.symlink(@trace, File.join(@dir, "link.gvl"))
    File.link(@trace, File.join(@dir, "hard.gvl"))
    ["t.gvl", "./t.gvl", @trace, "link.gvl", "hard.gvl"]
  end

  def temporary_files = Dir.children(@dir).grep(/\A\..*\.tmp\z/)

  # `gvlscope ARGS` in @dir: in this process for the commands that read a trace (many calls),
  # as a process for those that start a program. Returns [stdout, stderr, exit status].
  def gvlscope_in_dir(*args)
    return Dir.chdir(@dir) { gvlscope_in_process(*args) } unless %w[run top lab].include?(args.first)

    out, err, status = gvlscope(*args, chdir: @dir)
    [out, err, status.exitstatus]
  end

  def assert_refused_as_input(args_for, name)
    spellings.each do |spelling|
      out, err, status = gvlscope_in_dir(*args_for.(spelling))
      assert_equal 1, status, "#{name} #{spelling}: #{out}#{err}"
      assert_equal "gvlscope: #{spelling} is the input t.gvl (the same file): choose another #{name}\n", err, spelling
      assert_equal @trace_bytes, File.binread(@trace), "#{spelling}: the trace is intact"
      assert_empty temporary_files
    end
  end

  def assert_refused_as_existing(args, name, mine = File.join(@dir, "mine"))
    File.write(mine, "mine")
    out, err, status = gvlscope_in_dir(*args)
    assert_equal [1, ""], [status, out], err
    assert_match(/\Agvlscope: #{Regexp.escape(mine)} already exists: remove it, choose another #{Regexp.escape(name)}, or add --force\n\z/, err)
    assert_equal "mine", File.read(mine)
  end

  # Replaces +klass+#write for the block's time (Minitest stubs objects, not a class's instances).
  def with_write_of(klass, body)
    original = klass.instance_method(:write)
    klass.define_method(:write) { |io| body.(io) }
    yield
  ensure
    klass.define_method(:write, original)
  end

  def test_report_html
    assert_refused_as_input(->(out) { ["report", "t.gvl", "--html", out, "--force"] }, "--html")
    html = File.join(@dir, "page.html")
    assert_refused_as_existing(["report", "t.gvl", "--html", html], "--html", html)

    _out, err, status = gvlscope_in_dir("report", "t.gvl", "--html", html, "--force")
    assert_equal [0, "gvlscope: wrote #{html}\n"], [status, err]
    assert_match(/\A<!DOCTYPE html>/i, File.read(html))
    assert_equal 0o666 & ~File.umask, File.stat(html).mode & 0o777, "a new file's mode, not the temporary file's 0600"
    assert_empty temporary_files
  end

  # A write that fails half-way (a full disk) says so in one line, leaves no temporary file and
  # leaves the file it was to replace as it was; so does a failure of the work itself.
  def test_report_html_failing_mid_write_leaves_no_damage
    html = File.join(@dir, "page.html")
    File.write(html, "before")
    half_then = lambda do |error|
      lambda do |io|
        io << "<!DOCTYPE html><html>half"
        raise error
      end
    end
    { Errno::ENOSPC.new => "gvlscope: cannot write #{html}: No space left on device\n",
      GVLScope::Error.new("#{@trace}: something in the trace") => "gvlscope: #{@trace}: something in the trace\n" }.each do |error, said|
      with_write_of(GVLScope::Formats::ReportHTML, half_then.(error)) do
        _out, err, status = gvlscope_in_process("report", @trace, "--html", html, "--force")
        assert_equal [1, said], [status, err]
      end
      assert_equal "before", File.read(html)
      assert_empty temporary_files
    end
    # A new path: nothing is left at it either.
    fresh = File.join(@dir, "fresh.html")
    with_write_of(GVLScope::Formats::ReportHTML, half_then.(Errno::ENOSPC.new)) do
      assert_equal 1, gvlscope_in_process("report", @trace, "--html", fresh)[2]
    end
    refute File.exist?(fresh)
    assert_empty temporary_files
  end

  def test_export
    assert_refused_as_input(->(out) { ["export", "t.gvl", "--format", "chrome-json", "-o", out, "--force"] }, "-o")
    json = File.join(@dir, "t.json")
    assert_refused_as_existing(["export", @trace, "--format", "chrome-json"], "-o", json)
    _out, err, status = gvlscope_in_dir("export", "t.gvl", "--format", "chrome-json", "--force")
    assert_equal 0, status, err
    assert_includes File.read(json, 100), '"traceEvents"'
    assert_equal @trace_bytes, File.binread(@trace)

    # mid-write: the exporter fails after some bytes
    File.write(json, "before")
    failing = GVLScope::Formats.fetch("chrome-json", command: "export").format_class
    with_write_of(failing, ->(io) { io << "{\"traceEvents\":["; raise Errno::ENOSPC }) do
      _out, err, status = gvlscope_in_process("export", @trace, "--format", "chrome-json", "--force")
      assert_equal [1, "gvlscope: cannot write #{json}: No space left on device\n"], [status, err]
    end
    assert_equal "before", File.read(json)
    assert_empty temporary_files
  end

  # A pprof export of a trace whose start is past 2106 (gzip's 32-bit MTIME cannot hold it): was
  # "internal error: RangeError" and a 0-byte file that blocked the next export.
  def test_pprof_of_a_trace_that_starts_after_2106
    trace = File.join(@dir, "future.gvl")
    data = File.binread(File.join(ROOT, "test/fixtures/traces/hog.gvl"))
    data[24, 8] = [5 * 10**18].pack("Q<") # 2128
    File.binwrite(trace, data)
    out = File.join(@dir, "future.pb.gz")
    _stdout, err, status = gvlscope_in_process("export", trace, "--format", "pprof")
    assert_equal 0, status, err
    assert_match(/\Agvlscope: wrote #{Regexp.escape(out)} \(\d+ events, \d+ threads\)\n\z/, err)
    assert_equal 1, File.binread(out).unpack1("L<", offset: 4), "gzip's MTIME: 1 (the profile's time_nanos keeps the date)"
    assert_empty temporary_files
  end

  def test_run_html_and_format
    trace = File.join(@dir, "r.gvl")
    program = ["--", RbConfig.ruby, "-e", "exit 3"]
    # the page or the export at the trace's own path, as given or as ./path
    [["--html", "r.gvl"], ["--html", "./r.gvl"]].each do |option, path|
      _out, err, status = gvlscope("run", "-o", "r.gvl", option, path, *program, chdir: @dir)
      assert_equal 1, status.exitstatus, err
      assert_equal "gvlscope: #{path} is the input #{File.join(File.realpath(@dir), 'r.gvl')} (the same file): choose another --html\n", err
      refute File.exist?(trace), "the program did not run"
    end
    html = File.join(@dir, "page.html")
    assert_refused_as_existing(["run", "-o", trace, "--html", html, *program], "--html", html)
    refute File.exist?(trace), "refused before the program ran"
    export = File.join(@dir, "r.json")
    assert_refused_as_existing(["run", "-o", trace, "--format", "chrome-json", *program], "-o", export)
    refute File.exist?(trace)

    out, err, status = gvlscope("run", "--no-report", "-o", trace, "--html", html, "--format", "chrome-json", "--force", *program,
                                chdir: @dir)
    assert_equal [3, ""], [status.exitstatus, out], err
    assert_match(/\A<!DOCTYPE html>/i, File.read(html))
    assert_includes File.read(export, 100), '"traceEvents"'
    assert_empty temporary_files
  end

  def test_top_log
    log = File.join(@dir, "program.log")
    assert_refused_as_existing(["top", "--once", "--log", log, "--", RbConfig.ruby, "-e", "File.write('ran', '')"], "--log", log)
    _out, err, status = gvlscope("top", "--once", "--log", "same.gvl", "--trace", "same.gvl", "--", RbConfig.ruby, "-e", "1",
                                 chdir: @dir)
    assert_equal [1, "gvlscope: same.gvl is the input same.gvl (the same file): choose another --log\n"], [status.exitstatus, err]
    _out, err, status = gvlscope("top", "--once", "--trace", "t.gvl", "--", RbConfig.ruby, "-e", "1", chdir: @dir)
    assert_equal 1, status.exitstatus
    assert_equal "gvlscope: t.gvl already exists (a trace never overwrites a file): remove it or choose another --trace\n", err
    refute File.exist?(File.join(@dir, "ran")), "refused before the program ran"
    assert_equal @trace_bytes, File.binread(@trace)

    _out, err, status = gvlscope("top", "--once", "--log", log, "--force", "--", RbConfig.ruby, "-e", "puts 'from the program'",
                                 chdir: @dir)
    assert_includes [0, 1], status.exitstatus, err # the program may end before its socket opens: top says so
    assert_equal "from the program\n", File.read(log)
    assert_empty temporary_files
  end

  def test_lab_write
    page = File.join(@dir, "lab.md")
    assert_refused_as_existing(["lab", "all", "--size", "tiny", "--write", page], "--write", page)
  end

  # A scenario that traces itself and a traced child, then exits with +status+.
  def lab_scenario(status: 0)
    program = File.join(@dir, "engineered.rb")
    File.write(program, <<~RUBY)
      require #{File.join(ROOT, 'lab/lab_helper').inspect}
      include LabHelper
      system(RbConfig.ruby, "-e", "1") or abort "the child failed"
      result(answer: 42)
      exit #{status}
    RUBY
    GVLScope::Lab::Scenario.new(name: "engineered", file: program, summary: "test", source: "test", seconds: 1, claims: [])
  end

  def lab_runner(out_dir, force: false)
    require "gvlscope/lab/runner"
    GVLScope::Lab::Runner.new(GVLScope::Lab::Runner::Knobs.new(size: "tiny", priority: 0), out_dir: out_dir, force: force)
  end

  # `lab run` deleted every NAME-*.gvl in its -o directory before a run: a user's traces there
  # were lost. Now an earlier one refuses the run (lab run and lab all) unless --force; the
  # traces are written in a private directory and put in place once the run succeeded, and a
  # failed or interrupted run leaves the directory as it was.
  def test_lab_run
    traces = File.join(@dir, "traces")
    Dir.mkdir(traces)
    mine = File.join(traces, "convoy-1234.gvl")
    File.write(mine, "mine")
    said = "gvlscope: #{mine} already exists: remove it, choose another -o, or add --force\n"
    [%w[lab run convoy], %w[lab all --no-write]].each do |args|
      out, err, status = gvlscope_in_dir(*args, "--size", "tiny", "-o", traces)
      assert_equal [1, "", said], [status, out.lines.grep_v(/\A== lab/).join, err], args.join(" ")
      assert_equal ["convoy-1234.gvl"], Dir.children(traces), "#{args.join(' ')}: nothing written, nothing removed"
    end
    assert_equal "mine", File.read(mine)

    earlier = File.join(traces, "engineered-1.gvl")
    File.write(earlier, "earlier")
    error = assert_raises(GVLScope::Error) { lab_runner(traces).run(lab_scenario) }
    assert_equal "#{earlier} already exists: remove it, choose another -o, or add --force", error.message

    # A run that fails, and one interrupted as it puts its traces in place: what was there stays, nothing is added.
    error = assert_raises(GVLScope::Error) { capture_io { lab_runner(traces, force: true).run(lab_scenario(status: 3)) } }
    assert_match(/\Alab engineered failed \(pid \d+ exit 3\)/, error.message)
    assert_equal %w[convoy-1234.gvl engineered-1.gvl], Dir.children(traces).sort
    place = GVLScope::OutputFile.method(:place)
    calls = 0
    second_interrupted = lambda do |*args, **options|
      raise Interrupt if (calls += 1) == 2

      place.(*args, **options)
    end
    GVLScope::OutputFile.stub(:place, second_interrupted) do
      assert_raises(Interrupt) { lab_runner(traces, force: true).run(lab_scenario) }
    end
    assert_equal 2, calls, "the scenario and its child each wrote a trace"
    assert_equal %w[convoy-1234.gvl engineered-1.gvl], Dir.children(traces).sort
    assert_equal "earlier", File.read(earlier)

    # --force: this run's traces replace the scenario's earlier ones (only NAME-*.gvl). A relative
    # -o is this directory's, though the scenario runs in the gem's.
    result = Dir.chdir(@dir) { lab_runner("traces", force: true).run(lab_scenario) }
    written = Dir.children(traces).grep(/\Aengineered-\d+\.gvl\z/)
    assert_equal 2, written.size, Dir.children(traces).inspect
    assert_equal (%w[convoy-1234.gvl] + written).sort, Dir.children(traces).sort
    assert_includes written, File.basename(result.trace)
    assert_equal "mine", File.read(mine)
  end
end

# Issue 37, the rest of "never point the wrong way": a closed stdout ends a command as it ends
# cat; `run --no-report` reads no event; a trace without its end record is not called killed.
class CLIEndingsTest < Minitest::Test
  include GVLScopeTestHelper

  FIXTURES = File.join(ROOT, "test/fixtures")

  # `gvlscope report t.gvl | head -1` printed "gvlscope: Broken pipe" and exited 1. Now every
  # command that writes stdout dies of SIGPIPE, silently, as cat does.
  def test_a_closed_stdout_ends_every_command_as_it_ends_cat
    trace = File.join(FIXTURES, "traces/thrash.gvl")
    commands = [["report", trace], ["report", trace, "--json"], ["report", trace, "--format", "markdown"],
                ["report", trace, "--format", "html"], ["summary", trace], ["advise", trace],
                ["diff", File.join(FIXTURES, "diff/convoy-before.gvl"), File.join(FIXTURES, "diff/convoy-after.gvl")],
                ["diff", File.join(FIXTURES, "diff/before.prom"), File.join(FIXTURES, "diff/after.prom")], ["--help"], ["lab", "list"]]
    commands.each do |args|
      reader, writer = IO.pipe
      reader.close # what read stdout is gone before the first byte
      err_reader, err_writer = IO.pipe
      pid = Process.spawn(RbConfig.ruby, File.join(ROOT, "exe/gvlscope"), *args, out: writer, err: err_writer)
      [writer, err_writer].each(&:close)
      err = err_reader.read
      _, status = Process.wait2(pid)
      assert_equal ["PIPE", ""], [status.termsig && Signal.signame(status.termsig), err], "#{args.join(' ')}: #{status.inspect}"
    end
  end

  def trace_without_end_record(dir)
    data = File.binread(File.join(FIXTURES, "traces/convoy.gvl"))
    offset = 40
    offset += 8 + data.unpack1("L<", offset: offset + 4) until data.unpack1("L<", offset: offset) == 3 # the end record (type 3)
    path = File.join(dir, "ended.gvl")
    File.binwrite(path, data.byteslice(0, offset) + data.byteslice(offset + 8 + 24..))
    path
  end

  # A trace ends without an end record when its process was killed, when it exec'd (before the
  # recorder wrote one there), or when the file was cut: `summary` said "killed, or cut".
  def test_a_trace_without_its_end_record_names_every_cause
    Dir.mktmpdir("gvlscope-ended") do |dir|
      path = trace_without_end_record(dir)
      _out, err, status = gvlscope_in_process("summary", path)
      assert_equal [1, "gvlscope: #{path}: ended without an end record (the process was killed or exec'd, or the file was cut); " \
                       "--partial reads what it holds\n"], [status, err]
    end
  end

  # `run --no-report` read every trace (both engine passes) after the program, to say nothing.
  # It reads the framing only: a trace whose events are garbage is not read, and one without
  # its end record (a program's exit!, a kill) is not told: run's stderr is the program's.
  def test_no_report_reads_no_event
    Dir.mktmpdir("gvlscope-no-report") do |dir|
      garbage = File.join(dir, "garbage.gvl")
      data = File.binread(File.join(FIXTURES, "traces/convoy.gvl"))
      # the first record: an unknown event kind (the engine refuses it)
      data[40 + 8 + 24, 8] = [GVLScope::Model::Record.pack(GVLScope::Model::Record::MAX_KIND, 0, 0)].pack("Q<")
      File.binwrite(garbage, data)
      ended = trace_without_end_record(dir)
      err = StringIO.new
      cli = GVLScope::CLI.new(out: StringIO.new, err: err)
      require "gvlscope/model"
      GVLScope::Model::Scan.stub(:read, ->(*) { flunk "--no-report read the events" }) do
        cli.send(:after_run, [garbage, ended], show_summary: false, html: nil, export_format: nil, force: false)
      end
      assert_equal "", err.string
    end
  end
end
