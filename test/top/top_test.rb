# frozen_string_literal: true

require_relative "../test_helper"
require "gvlscope/live"
require "json"
require "tmpdir"

# `gvlscope top` as a user runs it: in a terminal (tmux: send-keys, capture-pane) and in scripts
# (--once, --json, a pipe), against test/fixtures/live/hog_and_io.rb: a CPU hog and a thread that
# waits for the GVL after each read.
class TopTest < Minitest::Test
  include GVLScopeTestHelper

  TARGET = File.join(ROOT, "test/fixtures/live/hog_and_io.rb")
  EXE = File.join(ROOT, "exe/gvlscope")
  PATIENCE = 30 # seconds any expected screen may take to appear (a loaded CI machine)

  def tmux(*args)
    out, err, status = Open3.capture3("tmux", "-L", @tmux_socket, *args)
    assert status.success?, "tmux #{args.join(' ')}: #{err}"
    out
  end

  def screen = tmux("capture-pane", "-p", "-t", "top")

  # Waits until the screen matches +pattern+; returns the screen.
  def wait_for_screen(pattern, why)
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + PATIENCE
    loop do
      text = screen
      return text if text.match?(pattern)

      flunk "#{why}: the screen never matched #{pattern.inspect}:\n#{text}" if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
      sleep 0.1
    end
  end

  def test_in_a_terminal_the_hog_holds_the_io_thread_waits_and_keys_work
    skip "tmux is not installed" unless system("command -v tmux >/dev/null")

    @tmux_socket = "gvlscope-top-test-#{Process.pid}"
    Dir.mktmpdir("gvlscope-top") do |dir|
      status_file = File.join(dir, "status")
      command = [RbConfig.ruby, EXE, "top", "--log", File.join(dir, "program.log"), "--", RbConfig.ruby, TARGET]
      shell = "#{command.map { |arg| "'#{arg}'" }.join(' ')}; echo $? > '#{status_file}'; sleep 60"
      tmux("new-session", "-d", "-s", "top", "-x", "200", "-y", "50", shell)
      begin
        text = wait_for_screen(/^top waiters: '/, "the first frame")
        assert_match(/^top holders: 'hog' \d+%/, text)
        assert_match(/^top waiters: 'io' \d+ ms in \d+ waits? at (IO#)?sysread/, text)
        assert_match(/^GVL held +\d+\.\d% \[#+\.*\]/, text)
        assert_match(/sort: wait/, text)
        assert_match(/^keys: q quit/, text)
        refute_match(/\e/, text)

        tmux("send-keys", "-t", "top", "s")
        text = wait_for_screen(/sort: run/, "s sorts by run")
        # Sorted by run time, the hog's row comes first.
        assert_match(/THREAD.*\n(hog|io)/, text)
        assert_equal "hog", text[/^THREAD.*\n(\S+)/, 1]

        tmux("send-keys", "-t", "top", "p")
        paused = wait_for_screen(/PAUSED/, "p pauses")
        sleep 2.5 # two refreshes: a paused frame does not change
        assert_equal paused, screen
        tmux("send-keys", "-t", "top", "p")
        text = wait_for_screen(/sort: run · \z|sort: run\n/, "p again resumes")
        refute_match(/PAUSED/, text)

        tmux("send-keys", "-t", "top", "q")
        deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + PATIENCE
        sleep 0.1 until File.exist?(status_file) && !File.read(status_file).empty? ||
                        Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
        # q ends the program (TERM, which the target turns into exit 7); top exits with its status.
        assert_equal "7", File.read(status_file).strip
      ensure
        system("tmux", "-L", @tmux_socket, "kill-server", err: File::NULL)
      end
    end
  end

  def test_once_prints_one_plain_frame_and_exits_with_the_programs_status
    out, err, status = gvlscope("top", "--once", "--", RbConfig.ruby, TARGET, "2")
    assert_equal 3, status.exitstatus, err
    refute_match(/\e/, out)
    assert_equal 1, out.scan(/^gvlscope top · pid \d+/).size
    assert_match(/^top holders: 'hog' (9\d|100)%/, out)
    assert_match(/^top waiters: 'io' /, out)
    assert_match(/^io +(idle|wait|run) /, out)
    assert_match(/^ +\d\d:\d\d:\d\d  Hog: 'hog' gave up the GVL/, out)
    refute_match(/keys:/, out, "no keys line where no key is read")
  end

  def test_once_json_is_a_snapshot_of_the_interval
    out, err, status = gvlscope("top", "--once", "--json", "--interval", "0.5", "--", RbConfig.ruby, TARGET, "2")
    assert_equal 3, status.exitstatus, err
    snapshot = GVLScope::Live::Snapshot.from_json(out)
    assert_equal "socket", snapshot.source
    assert_in_delta 0.5e9, snapshot.interval_ns, 0.45e9
    hog = snapshot.threads.find { |row| row.label == "hog" }
    io = snapshot.threads.find { |row| row.label == "io" }
    assert_operator hog.held_ns, :>, io.held_ns
    assert_operator io.wait_ns, :>, hog.wait_ns
    assert_match(/hog_and_io\.rb:\d+/, hog.code["at"])
  end

  def test_a_pipe_gets_a_plain_frame_per_interval
    out, err, status = gvlscope("top", "--interval", "0.5", "--", RbConfig.ruby, TARGET, "2.2")
    assert_equal 3, status.exitstatus, err
    frames = out.scan(/^gvlscope top · /).size
    assert_operator frames, :>=, 2, out
    refute_match(/\e/, out)
  end

  def test_a_missing_or_dead_target_is_one_clear_line_and_exit_1
    dead = Process.spawn("true")
    Process.wait(dead)
    out, err, status = gvlscope("top", dead.to_s)
    assert_equal 1, status.exitstatus
    assert_equal "gvlscope: no process #{dead} (it is not running)\n", err
    assert_empty out

    sleeper = Process.spawn("sleep", "30")
    begin
      _out, err, status = gvlscope("top", "--once", sleeper.to_s)
      assert_equal 1, status.exitstatus
      assert_match(/\Agvlscope: pid #{sleeper} has no gvlscope live socket: start it with GVLSCOPE_LIVE=1/, err)
      assert_equal 1, err.lines.size
    ensure
      Process.kill(:KILL, sleeper)
      Process.wait(sleeper)
    end

    closed = TCPServer.new("127.0.0.1", 0)
    port = closed.addr[1]
    closed.close
    _out, err, status = gvlscope("top", "--once", "--url", "http://127.0.0.1:#{port}/metrics")
    assert_equal 1, status.exitstatus
    assert_match(%r{\Agvlscope: cannot read http://127\.0\.0\.1:#{port}/metrics: .*refused}, err)
    assert_equal 1, err.lines.size
  end

  def test_bad_usage_exits_2_and_help_lists_every_option
    out, _err, status = gvlscope("top", "--help")
    assert status.success?
    %w[--url --interval --once --json --trace --log].each { |option| assert_includes out, option }
    [[], %w[12 13], %w[--json 12], %w[--interval 0 12], %w[abc], %w[--url http://x 12]].each do |args|
      _out, err, status = gvlscope("top", *args)
      assert_equal 2, status.exitstatus, "top #{args.join(' ')}: #{err}"
      assert_match(/\Agvlscope top: /, err)
    end
  end

  # The program's output once went to TMPDIR/gvlscope-top-<top's pid>.log, opened through any link
  # another user planted there. The shell plants one at that name, then becomes top (same pid).
  def test_the_programs_output_goes_to_a_new_file_not_through_a_planted_link
    Dir.mktmpdir("gvlscope-top-tmp") do |tmp|
      victim = File.join(tmp, "victim")
      File.write(victim, "precious")
      script = %(ln -s "$1" "$TMPDIR/gvlscope-top-$$.log" && shift && exec "$@")
      _out, err, _status = Open3.capture3({ "TMPDIR" => tmp }, "sh", "-c", script, "sh", victim, RbConfig.ruby, EXE, "top",
                                          "--once", "--interval", "0.2", "--", RbConfig.ruby, "-e",
                                          'puts "program output"; $stdout.flush; sleep 1.5')
      assert_equal "precious", File.read(victim)
      log = err[/the program's output is in (.+)$/, 1]
      refute_nil log, err
      assert_equal tmp, File.dirname(log)
      refute File.symlink?(log), "#{log} is a link"
      assert_equal "program output\n", File.read(log)
      assert_equal 0o600, File.stat(log).mode & 0o777
    end
  end

  def test_a_program_that_never_opens_a_socket_ends_top_with_its_status
    _out, err, status = gvlscope("top", "--once", "--", "sh", "-c", "exit 4")
    assert_equal 4, status.exitstatus
    assert_match(/the program ended before it opened its live socket/, err)
  end
end
