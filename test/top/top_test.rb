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

  # `top ... -- TARGET` until top printed +frames+ frames (or the JSON line), then the target ends
  # on TERM (exit 7). A target that ended on its own after 2 s used to end, on a loaded machine,
  # before top's first frame: the tests failed with no frame. Returns [stdout, stderr, status].
  def top_until_frames(*options, frames: 1, target: TARGET)
    out_reader, out_writer = IO.pipe
    err_reader, err_writer = IO.pipe
    top = Process.spawn(RbConfig.ruby, EXE, "top", *options, "--", RbConfig.ruby, target, "600",
                        in: File::NULL, out: out_writer, err: err_writer)
    [out_writer, err_writer].each(&:close)
    errors = Thread.new { err_reader.read }
    out = +""
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + GVLScopeTestHelper.hang_limit(PATIENCE)
    until out.scan(/^gvlscope top · pid \d+|^\{/).size >= frames
      left = deadline - Process.clock_gettime(Process::CLOCK_MONOTONIC)
      break unless left.positive? && out_reader.wait_readable(left) && (chunk = out_reader.read_nonblock(1 << 16, exception: false))

      out << chunk.force_encoding(Encoding::UTF_8) if chunk.is_a?(String)
    end
    # The target when top showed it; else top itself, which ends the target on TERM.
    target = out[/^gvlscope top · pid (\d+)/, 1] || out[/^\{.*?"pid":(\d+)/, 1]
    Process.kill("TERM", target ? Integer(target) : top)
    out << out_reader.read.force_encoding(Encoding::UTF_8)
    [out, errors.value, Process.wait2(top).last]
  ensure
    [out_reader, err_reader].each { |io| io&.close }
  end

  def test_once_prints_one_plain_frame_and_exits_with_the_programs_status
    out, err, status = top_until_frames("--once")
    assert_equal 7, status.exitstatus, err
    refute_match(/\e/, out)
    assert_equal 1, out.scan(/^gvlscope top · pid \d+/).size
    assert_match(/^top holders: 'hog' \d+%/, out) # 86-100 %: a loaded machine lets the io thread in more often
    assert_match(/^top waiters: 'io' /, out)
    assert_match(/^io +(idle|wait|run) /, out)
    assert_match(/^ +\d\d:\d\d:\d\d  Hog: 'hog' gave up the GVL/, out)
    refute_match(/keys:/, out, "no keys line where no key is read")
    refute_match(/EVENT LOOP/, out, "no event-loop section where no thread runs a loop")
  end

  def test_once_json_is_a_snapshot_of_the_interval
    out, err, status = top_until_frames("--once", "--json", "--interval", "0.5")
    assert_equal 7, status.exitstatus, err
    snapshot = GVLScope::Live::Snapshot.from_json(out)
    assert_equal "socket", snapshot.source
    # At least about what was asked; a loaded machine stretches it (1.17 s at load 16), never shortens it.
    assert_operator snapshot.interval_ns, :>=, 0.4e9
    hog = snapshot.threads.find { |row| row.label == "hog" }
    io = snapshot.threads.find { |row| row.label == "io" }
    assert_operator hog.held_ns, :>, io.held_ns
    assert_operator io.wait_ns, :>, hog.wait_ns
    assert_match(/hog_and_io\.rb:\d+/, hog.code["at"])
    assert(snapshot.threads.none?(&:loop), "threads without an event loop have none")
    refute_includes out, '"loop"'
  end

  LOOP_TARGET = File.join(ROOT, "test/fixtures/live/event_loop.rb")
  # event_loop.rb's CPU time per turn: each turn of its loop lasts at least this long, however loaded the machine.
  BURN_NS = 40_000_000
  # A turn's BURN_NS of CPU clock, read on the trace's (TSC) clock: within 1 % (a 40 ms turn read 39.98).
  TURN_NS = BURN_NS * 0.99
  # Intervals of 2 s: a turn ends in each unless 40 ms of CPU take the loop's thread 2 s.
  LOOP_INTERVAL = "2"

  # The loop thread's figures against its turns of BURN_NS or more (each in the Log2 buckets from
  # BURN_NS's on); the other threads have no loop.
  def test_once_json_has_the_event_loop_of_its_thread
    out, err, status = top_until_frames("--once", "--json", "--interval", LOOP_INTERVAL, target: LOOP_TARGET)
    assert_equal 7, status.exitstatus, err
    snapshot = GVLScope::Live::Snapshot.from_json(out)
    looped, others = snapshot.threads.partition { |row| row.label == "loop" }
    assert_equal 1, looped.size, out
    assert(others.none?(&:loop), "the main thread and gvlscope's have no loop")
    loop = looped.first.loop
    assert_operator loop.turns, :>=, 1
    assert_equal loop.turns, loop.turn_histogram.sum
    assert_equal 0, loop.turn_histogram.first(GVLScope::Log2.bucket(BURN_NS)).sum, "no turn shorter than the burn"
    assert_operator loop.busy_ns, :>=, loop.turns * TURN_NS
    # The turns ended in the interval; the first may have begun before it, by a turn at most.
    assert_operator loop.busy_ns, :<=, snapshot.interval_ns + loop.longest_turn_ns
    assert_operator loop.turns, :<=, snapshot.interval_ns / BURN_NS + 1
    assert_operator loop.longest_turn_ns, :>=, TURN_NS
    assert_operator loop.lag_ns, :>=, TURN_NS
    assert_operator loop.lag_ns, :<=, loop.longest_turn_ns
  end

  def test_once_shows_the_event_loop_of_its_thread_and_its_long_turn
    out, err, status = top_until_frames("--once", "--interval", LOOP_INTERVAL, target: LOOP_TARGET)
    assert_equal 7, status.exitstatus, err
    interval_s = Float(out[/· interval ([\d.]+) s ·/, 1])
    rows = out[/^EVENT LOOP +BUSY% +TURNS\/S +LONGEST +LAG p99\n((?:.+\n)*)/, 1]
    assert rows, out
    assert_equal 1, rows.lines.size, "only the loop's thread has a row: #{rows}"
    busy, per_s, longest, lag = rows.match(/\Aloop +(\d+)% +([\d.]+) +(\d+) ms +(\d+) ms\n\z/)&.captures&.map { |n| Float(n) }
    assert busy, rows
    assert_operator longest, :>=, TURN_NS / 1e6
    assert_operator lag, :>=, TURN_NS / 1e6
    assert_operator lag, :<=, longest
    assert_operator per_s, :<=, (1e9 / BURN_NS) + (1 / interval_s) + 0.05 # (printed to 0.1)
    assert_operator busy, :>=, (per_s - 0.05) * TURN_NS / 1e7 - 0.5 # each turn kept the thread BURN_NS at least
    assert_operator busy, :<=, 100 * (1 + (longest / 1e3 / interval_s)) + 0.5
    assert_match(/^ +\d\d:\d\d:\d\d  Event loop of 'loop': longest turn \d+ ms \(lag p99 \d+ ms, \d+ turns, busy \d+%\); its code is unknown live: trace with --fibers to name it$/, out)
  end

  def test_a_pipe_gets_a_plain_frame_per_interval
    out, err, status = top_until_frames("--interval", "0.5", frames: 2)
    assert_equal 7, status.exitstatus, err
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

  # A live socket that does not answer (here every snapshot fails in the program) used to end
  # top with its own error and status 1, the program stopped: now top says why in one line and
  # exits with the program's status when it ends.
  def test_a_socket_that_does_not_answer_still_ends_top_with_the_programs_status
    Dir.mktmpdir("gvlscope-top") do |dir|
      # Loaded before autorun opens the socket (-r on the command line goes before RUBYOPT's).
      File.write(File.join(dir, "no_snapshot.rb"), <<~RUBY)
        require "gvlscope/integrations/live_server"
        ASKED = Queue.new
        GVLScope::LiveServer.prepend(Module.new { def snapshot_json(**) = (ASKED << true; raise GVLScope::Error, "no snapshot here") })
      RUBY
      # It ends 5 s after the first request: longer than top waits for a program ending.
      program = [RbConfig.ruby, "-I", File.join(ROOT, "lib"), "-r", File.join(dir, "no_snapshot.rb"), "-e", "ASKED.pop; sleep 5; exit 5"]
      out, err, status = gvlscope("top", "--once", "--", *program)
      assert_equal 5, status.exitstatus, err
      assert_empty out
      assert_match(/\Agvlscope: pid \d+: internal error: GVLScope::Error: no snapshot here: no more frames; top exits with the program's status when it ends\n/, err)
    end
  end

  # A program that ends before the first interval: its status, and one line saying there is no frame.
  def test_a_program_that_ends_before_the_first_frame_ends_top_with_its_status
    Dir.mktmpdir("gvlscope-top") do |dir|
      File.write(File.join(dir, "asked.rb"), <<~RUBY)
        require "gvlscope/integrations/live_server"
        ASKED = Queue.new
        GVLScope::LiveServer.prepend(Module.new { def snapshot_json(**) = (ASKED << true; super) })
      RUBY
      program = [RbConfig.ruby, "-I", File.join(ROOT, "lib"), "-r", File.join(dir, "asked.rb"), "-e", "ASKED.pop; exit 6"]
      out, err, status = gvlscope("top", "--once", "--interval", "3", "--", *program)
      assert_equal 6, status.exitstatus, err
      assert_empty out
      assert_match(/\Agvlscope: the program ended before the first frame \(interval 3.0 s\)\n/, err)
    end
  end

  def test_a_program_that_never_opens_a_socket_ends_top_with_its_status
    _out, err, status = gvlscope("top", "--once", "--", "sh", "-c", "exit 4")
    assert_equal 4, status.exitstatus
    assert_match(/the program ended before it opened its live socket/, err)
  end
end
