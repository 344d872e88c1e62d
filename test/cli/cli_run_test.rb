# frozen_string_literal: true

require "test_helper"
require "tmpdir"

# `gvlscope run -- COMMAND`: traces an unmodified program, passes its output and exit status
# through, and gives forked children their own trace files.
class CLIRunTest < Minitest::Test
  include GVLScopeTestHelper

  def test_run_traces_a_program_and_keeps_its_output_and_status
    Dir.mktmpdir("gvlscope-run") do |dir|
      File.write(File.join(dir, "app.rb"), <<~RUBY)
        t = Thread.new { Thread.current.name = "worker"; sleep 0.01 }
        t.join
        puts "app output"
        $stderr.puts "app error"
        exit 3
      RUBY
      out, err, status = gvlscope("run", "-o", "trace.gvl", "--", RbConfig.ruby, "app.rb", chdir: dir)
      assert_equal 3, status.exitstatus
      assert_equal "app output\n", out
      assert_match(/^app error$/, err)
      assert_match(/GVL held .* of the time/, err)
      assert_match(/^worker /, err)
      timeline = GVLScope::Model.timeline(File.join(dir, "trace.gvl"))
      assert(timeline.threads.values.any? { |t| t.label == "worker" })
    end
  end

  def test_forked_children_write_their_own_traces
    Dir.mktmpdir("gvlscope-run") do |dir|
      File.write(File.join(dir, "forker.rb"), <<~RUBY)
        pid = fork { Thread.new { sleep 0.01 }.join }
        Process.wait(pid)
        puts pid
      RUBY
      out, err, status = gvlscope("run", "--no-summary", "-o", "t-%p.gvl", "--", RbConfig.ruby, "forker.rb", chdir: dir)
      assert status.success?, err
      child = out.to_i
      files = Dir.children(dir).grep(/\.gvl\z/).sort
      assert_equal 2, files.size, files.inspect
      assert_includes files, "t-#{child}.gvl"
      child_trace = GVLScope::Model::TraceFile.read(File.join(dir, "t-#{child}.gvl"))
      refute child_trace.truncated?
      assert_equal child, child_trace.pid
    end
  end

  # -o without %p: the first process to create the path keeps it; a forked child and a sub-Ruby
  # get their pid in the name, and never truncate the parent's trace. An existing file stops the run.
  def test_without_p_the_first_process_keeps_the_path_and_others_get_their_pid
    Dir.mktmpdir("gvlscope-run") do |dir|
      File.write(File.join(dir, "app.rb"), <<~RUBY)
        child = fork { Thread.new { sleep 0.01 }.join }
        Process.wait(child)
        system(RbConfig.ruby, "-e", "Thread.new { sleep 0.01 }.join") or abort "sub-Ruby failed"
        Thread.new { sleep 0.01 }.join
        puts Process.pid, child
      RUBY
      out, err, status = gvlscope("run", "--no-report", "-o", "trace.gvl", "--", RbConfig.ruby, "app.rb", chdir: dir)
      assert status.success?, err
      parent, child = out.split.map(&:to_i)
      files = Dir.children(dir).grep(/\.gvl\z/)
      assert_equal 3, files.size, files.inspect
      traces = files.to_h { |name| [name, GVLScope::Model::TraceFile.read(File.join(dir, name))] }
      traces.each_value { |trace| refute trace.truncated?, trace.path }
      assert_equal parent, traces.fetch("trace.gvl").pid
      assert_equal child, traces.fetch("trace-#{child}.gvl").pid
      sub = traces.values.map(&:pid) - [parent, child]
      assert_equal ["trace-#{sub.first}.gvl"], files - ["trace.gvl", "trace-#{child}.gvl"]

      before = File.binread(File.join(dir, "trace.gvl"))
      out, err, status = gvlscope("run", "-o", "trace.gvl", "--", RbConfig.ruby, "app.rb", chdir: dir)
      assert_equal 1, status.exitstatus
      assert_empty out, "the program did not run"
      assert_equal "gvlscope: #{File.join(File.realpath(dir), 'trace.gvl')} already exists (a trace never overwrites a file): " \
                   "remove it or choose another -o\n", err
      assert_equal before, File.binread(File.join(dir, "trace.gvl"))
    end
  end

  def test_run_writes_the_html_report_and_exports
    Dir.mktmpdir("gvlscope-run") do |dir|
      File.write(File.join(dir, "app.rb"), "Thread.new { sleep 0.01 }.join\n")
      _out, err, status = gvlscope("run", "-o", "app.gvl", "--html", "app.html", "--format", "perfetto", "--",
                                   RbConfig.ruby, "app.rb", chdir: dir)
      assert status.success?, err
      assert_match(/full report: gvlscope report .*app\.gvl/, err)
      assert_match(/<canvas/, File.read(File.join(dir, "app.html")))
      assert_operator File.size(File.join(dir, "app.pftrace")), :>, 0
    end
  end

  def test_metrics_only_prints_metrics_and_writes_no_trace
    Dir.mktmpdir("gvlscope-run") do |dir|
      File.write(File.join(dir, "app.rb"), "2.times.map { Thread.new { x = 0; 2_000_000.times { x += 1 } } }.each(&:join)\n")
      _out, err, status = gvlscope("run", "--metrics-only", "--", RbConfig.ruby, "app.rb", chdir: dir)
      assert status.success?, err
      assert_match(/GVL metrics of pid \d+/, err)
      assert_match(/^GVL held [\d.]+% of/, err)
      assert_empty Dir.children(dir).grep(/\.gvl\z/)
      _out, err, status = gvlscope("run", "--metrics-only", "--html", "x.html", "--", RbConfig.ruby, "app.rb", chdir: dir)
      assert_equal 2, status.exitstatus
      assert_match(/cannot go with/, err)
    end
  end

  # Each recording native thread holds a 64 KiB chunk: 40 threads need more than 1 MB.
  def test_buffer_size_decides_whether_many_threads_lose_events
    Dir.mktmpdir("gvlscope-run") do |dir|
      File.write(File.join(dir, "app.rb"), "40.times.map { Thread.new { sleep 0.01 } }.each(&:join)\n")
      _out, err, status = gvlscope("run", "--no-report", "--buffer", "1", "-o", "small.gvl", "--", RbConfig.ruby, "app.rb", chdir: dir)
      assert status.success?, err
      assert_match(/dropped/, err)
      assert_match(/gvlscope run --buffer MB \(now 1 MB/, err)
      assert_operator GVLScope::Model::TraceFile.read(File.join(dir, "small.gvl")).dropped, :>, 0
      _out, err, status = gvlscope("run", "--no-report", "-o", "default.gvl", "--", RbConfig.ruby, "app.rb", chdir: dir)
      assert status.success?, err
      refute_match(/dropped/, err)
      assert_equal 0, GVLScope::Model::TraceFile.read(File.join(dir, "default.gvl")).dropped
      _out, err, status = gvlscope("run", "--buffer", "0", "--", RbConfig.ruby, "app.rb", chdir: dir)
      assert_equal 2, status.exitstatus
      assert_match(/--buffer must be at least 1/, err)
    end
  end

  # Writes +source+ as app.rb in a new directory, runs `gvlscope run ARGS -- ruby app.rb` there and
  # yields its stdout, stderr, status and the directory.
  def run_app(source, *args)
    Dir.mktmpdir("gvlscope-run") do |dir|
      File.write(File.join(dir, "app.rb"), source)
      yield(*gvlscope("run", *args, "--", RbConfig.ruby, "app.rb", chdir: dir), dir)
    end
  end

  # The program's stderr is its own: with --no-report, gvlscope adds nothing when all went well.
  def test_no_report_prints_nothing_when_all_went_well
    run_app("Thread.new { sleep 0.01 }.join\nputs 'out'\n$stderr.puts 'err'\n", "--no-report", "-o", "t.gvl") do |out, err, status, dir|
      assert status.success?, err
      assert_equal ["out\n", "err\n"], [out, err]
      refute GVLScope::Model::TraceFile.read(File.join(dir, "t.gvl")).truncated?
    end
  end

  # gvlscope's own words reach the person who ran it, after the program, not the program's stderr
  # (which a test suite may compare or a program may redirect into its log).
  def test_not_tracing_is_said_by_gvlscope_after_the_program
    run_app("$stderr.puts 'program done'\n", "--no-report", "-o", "missing/t.gvl") do |_out, err, status|
      assert status.success?, err
      assert_match(/\Aprogram done\ngvlscope: not tracing pid \d+: No such file or directory - .*missing\/t\.gvl\n/, err)
    end
  end

  def test_metrics_only_output_never_goes_into_the_programs_stderr
    run_app("$stderr.reopen('app.log', 'w')\n$stderr.puts 'logged'\n", "--metrics-only") do |_out, err, status, dir|
      assert status.success?, err
      assert_equal "logged\n", File.read(File.join(dir, "app.log"))
      assert_match(/\Agvlscope: GVL metrics of pid \d+ \(app\.rb\)\nGVL held /, err)
    end
  end

  def test_run_without_a_command_is_a_usage_error
    _out, err, status = gvlscope("run", chdir: ROOT)
    assert_equal 2, status.exitstatus
    assert_match(/run needs a COMMAND/, err)
  end
end
