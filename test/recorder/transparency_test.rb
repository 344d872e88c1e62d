# frozen_string_literal: true

require "test_helper"
require "tmpdir"
require "timeout"

# A traced program behaves exactly as untraced: each program below runs once as `ruby PROGRAM` and
# once as `gvlscope run --no-report -o DIR/t-%p.gvl -- ruby PROGRAM`, and both runs must give the
# same stdout, stderr and exit status (or signal); the traced run must also have written its
# traces, so a program gvlscope silently failed to trace cannot pass.
class TransparencyTest < Minitest::Test
  include GVLScopeTestHelper

  # The same environment for both runs, without Bundler: RubyGems loads it when BUNDLER_SETUP is
  # set, and a --disable-gems program must run without RubyGems.
  ENV_OF_BOTH = %w[RUBYOPT RUBYLIB BUNDLER_SETUP BUNDLE_GEMFILE BUNDLE_BIN_PATH GVLSCOPE_OUTPUT GVLSCOPE_RUN_DIR]
                .to_h { |name| [name, nil] }.freeze
  TIMEOUT = 60

  # traces: how many processes write a trace; complete: how many of them stop it at exit (a process
  # that ends by exit! or exec does not, and leaves a trace without its end, perhaps without events).
  Program = Struct.new(:source, :ruby_args, :traces, :complete, keyword_init: true) do
    def initialize(traces: 1, complete: traces, **) = super
  end

  PROGRAMS = {
    "threads" => Program.new(traces: 1, source: <<~'RUBY'),
      queue = Queue.new
      lock = Mutex.new
      total = 0
      workers = 4.times.map do |n|
        Thread.new do
          Thread.current.name = "worker #{n}"
          while (item = queue.pop)
            lock.synchronize { total += item }
          end
        end
      end
      100.times { |i| queue << i }
      4.times { queue << nil }
      workers.each(&:join)
      puts "total #{total}"
      puts Thread.list.size
    RUBY
    "output" => Program.new(traces: 1, source: <<~'RUBY'),
      puts "line"
      print "no newline"
      $stdout.write("x" * 100_000, "\n")
      $stderr.puts "to stderr"
      $stderr.write("\xff\xfe binary\n".b)
      STDOUT.syswrite("syswrite\n")
      warn "a warning"
    RUBY
    "exit_status" => Program.new(traces: 1, source: "puts 'exiting'\nexit 42\n"),
    "uncaught_exception" => Program.new(traces: 1, source: "def boom = raise(ArgumentError, 'boom')\nboom\n"),
    "at_exit_order" => Program.new(traces: 1, source: <<~'RUBY'),
      at_exit { puts "registered first, runs last"; $stdout.flush }
      at_exit do
        puts "registered second, runs first"
        Thread.new { puts "a thread in at_exit" }.join
        exit 7
      end
      puts "main done"
    RUBY
    # The trace stops at exit without the main thread sleeping or waiting while other threads
    # still run: untraced, this thread is killed before it sees the main thread stopped.
    "main_thread_exit" => Program.new(source: <<~'RUBY'),
      main = Thread.current
      Thread.new do
        Thread.pass until main.stop? # asleep below
        main.run
        Thread.pass until main.stop?
        p :main_stopped
      end
      sleep # and then the end: no IO, which would let the thread run
    RUBY
    "exit_bang" => Program.new(complete: 0, source: <<~'RUBY'),
      at_exit { puts "never printed" }
      puts "before exit!"
      $stdout.flush
      exit!(5)
    RUBY
    "fork" => Program.new(traces: 4, complete: 3, source: <<~'RUBY'),
      $stdout.sync = true
      at_exit { puts "at_exit of #{Process.pid == $main ? 'the parent' : 'a child'}" }
      $main = Process.pid
      child = fork { Thread.new { puts "child thread" }.join; exit 3 }
      Process.wait(child)
      puts "child exited #{$?.exitstatus}"
      quick = fork { exit!(4) }
      Process.wait(quick)
      puts "exit! child exited #{$?.exitstatus}"
      reader, writer = IO.pipe
      talker = fork { reader.close; writer.puts "through a pipe"; writer.close }
      writer.close
      text = reader.read
      Process.wait(talker)
      puts text
    RUBY
    # exec ends the trace of the image it replaces complete (issue 37: readable only with --partial).
    "sub_ruby_and_exec" => Program.new(traces: 4, complete: 4, source: <<~'RUBY'),
      $stdout.sync = true
      system(RbConfig.ruby, "-e", "puts 'sub-Ruby'; exit 2")
      puts "system: #{$?.exitstatus}"
      puts IO.popen([RbConfig.ruby, "-e", "print 'popen'"], &:read)
      exec(RbConfig.ruby, "-e", "puts 'after exec'; $stderr.puts 'exec stderr'; exit 6")
    RUBY
    # An exec that fails: the program goes on, traced into a file of its own; Puma's USR2 hot
    # restart execs through Kernel.exec.
    "failed_exec" => Program.new(traces: 3, source: <<~'RUBY'),
      $stdout.sync = true
      Thread.new { sleep 0.001 }.join
      begin
        exec("./no-such-program")
      rescue SystemCallError => e
        puts e.class
      end
      Thread.new { sleep 0.001 }.join
      Kernel.exec(RbConfig.ruby, "-e", "Thread.new { sleep 0.001 }.join; puts 'after exec'")
    RUBY
    "trap" => Program.new(source: <<~'RUBY'),
      $stdout.sync = true
      got = Queue.new
      %w[USR1 USR2 HUP].each { |name| trap(name) { got << name } }
      old = trap("INT") { got << "INT" }
      puts "previous INT handler: #{old.inspect}"
      %w[USR1 USR2 HUP INT].each { |name| Process.kill(name, Process.pid); puts "handled #{got.pop}" }
      trap("TERM") { puts "TERM in trap"; exit 9 }
      Process.kill("TERM", Process.pid)
      sleep
    RUBY
    "killed_by_a_signal" => Program.new(source: <<~'RUBY'),
      $stdout.sync = true
      at_exit { puts "at_exit runs on TERM" }
      Thread.new { sleep }
      puts "sending TERM to myself"
      Process.kill("TERM", Process.pid)
      sleep
    RUBY
    "interrupted" => Program.new(source: <<~'RUBY'),
      begin
        Process.kill("INT", Process.pid)
        sleep
      rescue Interrupt => e
        puts "rescued #{e.class}"
      end
      Process.kill("INT", Process.pid)
      sleep
    RUBY
    "disable_gems" => Program.new(traces: 1, ruby_args: ["--disable-gems"], source: <<~'RUBY'),
      Thread.new { Thread.current.name = "worker"; sleep 0.01 }.join
      puts defined?(Gem).inspect
      $stderr.puts "stderr of a --disable-gems Ruby"
    RUBY
  }.freeze

  PROGRAMS.each do |name, program|
    define_method("test_#{name}_behaves_the_same_traced") { assert_transparent(name, program) }
  end

  # What a supervisor (docker, systemd, foreman, a CI runner) sends to the process it started
  # reaches the program: it traps the signal, says so and exits with its own code, which gvlscope
  # run exits with too, after its summary. A program that does not trap TERM dies of it, and so
  # does gvlscope run.
  def test_signals_sent_to_gvlscope_run_reach_the_program
    %w[TERM INT HUP QUIT USR1 USR2].each_with_index do |signal, index|
      out, err, status = run_and_signal(<<~RUBY, signal)
        trap("#{signal}") { puts "program got #{signal}"; exit #{40 + index} }
        puts "ready"
        $stdout.flush
        sleep
      RUBY
      assert_equal "ready\nprogram got #{signal}\n", out, "#{signal}: #{err}"
      assert_equal 40 + index, status.exitstatus, "#{signal}: #{err}"
      assert_match(/full report: gvlscope report /, err, signal)
    end
    out, err, status = run_and_signal("at_exit { puts 'at_exit' }\nputs 'ready'\n$stdout.flush\nsleep\n", "TERM")
    assert_equal "ready\nat_exit\n", out
    assert_equal Signal.list["TERM"], status.termsig, "#{status.inspect}: #{err}"
    assert_match(/full report: gvlscope report /, err)
  end

  # Signals inherited as ignored stay ignored: `nohup` ignores HUP, and a shell script's background
  # job starts with INT and QUIT ignored. A traced program must start with exactly the dispositions
  # it would have had (issue 37: under `nohup gvlscope run` it died of HUP, a background Puma of
  # QUIT). The program prints its ignored and caught signals, then sends HUP, INT and QUIT to its
  # whole process group (a hangup, as the terminal sends it): nobody dies, traced or not.
  def test_signals_inherited_as_ignored_stay_ignored
    Dir.mktmpdir("gvlscope-transparency") do |dir|
      File.write(File.join(dir, "app.rb"), <<~'RUBY')
        $stdout.sync = true
        puts File.readlines("/proc/self/status").grep(/\ASig(Ign|Cgt):/)
        %w[HUP INT QUIT].each { |name| Process.kill(name, 0) }
        sleep 0.2
        puts "survived"
      RUBY
      ignoring = ["sh", "-c", 'trap "" HUP INT QUIT; exec "$@"', "sh"]
      plain = Open3.capture3(ENV_OF_BOTH, *ignoring, RbConfig.ruby, "app.rb", chdir: dir, pgroup: true)
      traced = Open3.capture3(ENV_OF_BOTH, *ignoring, RbConfig.ruby, File.join(ROOT, "exe/gvlscope"), "run", "--no-report",
                              "-o", File.join(dir, "t-%p.gvl"), "--", RbConfig.ruby, "app.rb", chdir: dir, pgroup: true)
      assert_match(/^SigIgn:.*\nSigCgt:.*\nsurvived\n\z/, plain[0])
      ignored = plain[0][/^SigIgn:\s*(\h+)/, 1].to_i(16)
      %w[HUP INT QUIT].each { |name| assert ignored[Signal.list[name] - 1] == 1, "#{name} not ignored: #{plain[0]}" }
      assert_equal [plain[0], plain[1], plain[2].exitstatus], [traced[0], traced[1], traced[2].exitstatus],
                   "gvlscope run changed what the program inherited (#{traced[2].inspect})"
      assert_equal 1, Dir[File.join(dir, "t-*.gvl")].size
    end
  end

  # In a terminal, Ctrl-C (INT), Ctrl-\ (QUIT) and a hangup (HUP) reach the whole foreground process
  # group, the program included: gvlscope run, in the foreground, does not pass them on a second
  # time. (An INT sent to gvlscope run alone, as here, shows that: the program never gets it. The
  # tty's own Ctrl-C cannot show it, as the kernel merges a second INT into a first not yet taken.)
  def test_in_a_terminal_the_terminals_signals_are_not_passed_on_twice
    require "pty"
    Dir.mktmpdir("gvlscope-transparency") do |dir|
      File.write(File.join(dir, "app.rb"), <<~'RUBY')
        count = 0
        trap("INT") { count += 1 }
        trap("TERM") { puts "INT received #{count} times"; exit 0 }
        puts "ready"
        sleep
      RUBY
      command = [RbConfig.ruby, File.join(ROOT, "exe/gvlscope"), "run", "--no-report", "-o", File.join(dir, "t-%p.gvl"),
                 "--", RbConfig.ruby, "app.rb"]
      output = +""
      status = nil
      PTY.spawn(ENV_OF_BOTH, *command, chdir: dir) do |reader, _writer, pid|
        Timeout.timeout(TIMEOUT) do
          output << reader.gets until output.include?("ready")
          Process.kill(:INT, pid)
          sleep 0.5
          Process.kill(:TERM, pid) # passed on: the program reports and exits
          begin
            reader.each_line { |line| output << line }
          rescue Errno::EIO
            nil # the terminal closed: every process on it exited
          end
          _, status = Process.wait2(pid)
        end
      end
      assert_match(/^INT received 0 times\r?$/, output)
      assert status.success?, output
    end
  end

  private

  # Runs +source+ under gvlscope run, sends +signal+ to gvlscope run once the program printed its
  # first line; returns [stdout, stderr, status] of gvlscope run. gvlscope run leads a process
  # group of its own, so a program it left behind is found (and killed) here.
  # The suite itself may run with INT and QUIT ignored (started as a shell's background job), and
  # gvlscope run keeps an inherited ignore, as the program would: the signals under test start at
  # their defaults here (a Ruby that resets them, then execs gvlscope run in its place: same pid).
  SIGNALS_AT_DEFAULT = '%w[TERM INT HUP QUIT USR1 USR2].each { |name| trap(name, "SYSTEM_DEFAULT") }; exec(*ARGV)'

  def run_and_signal(source, signal)
    Dir.mktmpdir("gvlscope-transparency") do |dir|
      File.write(File.join(dir, "app.rb"), source)
      command = [RbConfig.ruby, "-e", SIGNALS_AT_DEFAULT, RbConfig.ruby, File.join(ROOT, "exe/gvlscope"), "run", "-o", "t-%p.gvl",
                 "--", RbConfig.ruby, "app.rb"]
      Open3.popen3(ENV_OF_BOTH, *command, chdir: dir, pgroup: true) do |stdin, stdout, stderr, waiter|
        stdin.close
        err = Thread.new { stderr.read }
        first = Thread.new { stdout.gets }
        flunk "the program did not start in #{TIMEOUT} s" unless first.join(TIMEOUT)
        Process.kill(signal, waiter.pid)
        status = waiter.join(TIMEOUT)&.value
        orphaned = begin
          Process.kill(:KILL, -waiter.pid)
        rescue Errno::ESRCH
          nil
        end
        flunk "gvlscope run did not exit #{TIMEOUT} s after SIG#{signal}" unless status
        refute orphaned, "SIG#{signal}: gvlscope run exited and left the program running"
        [first.value.to_s + stdout.read, err.value, status]
      end
    end
  end

  def assert_transparent(name, program)
    Dir.mktmpdir("gvlscope-transparency") do |dir|
      File.write(File.join(dir, "#{name}.rb"), program.source)
      command = [RbConfig.ruby, *program.ruby_args, "#{name}.rb"]
      plain = capture(command, dir)
      traced = capture([RbConfig.ruby, File.join(ROOT, "exe/gvlscope"), "run", "--no-report", "-o",
                        File.join(dir, "t-%p.gvl"), "--", *command], dir)
      assert_equal plain, traced, "#{name}: [stdout, stderr, [exit status, signal]] differ with gvlscope run"
      traces = Dir[File.join(dir, "t-*.gvl")]
      assert_equal program.traces, traces.size, "#{name}: traces #{traces.inspect}"
      files = traces.map { |trace| GVLScope::Model::TraceFile.read(trace) }
      complete = files.reject(&:truncated?)
      assert_equal program.complete, complete.size, "#{name}: complete traces of #{traces.inspect}"
      complete.each { |file| assert_operator file.size, :>, 0, file.path }
    end
  end

  def capture(command, dir)
    out, err, status = run_process(command, env: ENV_OF_BOTH, chdir: dir, timeout: TIMEOUT)
    [out, err, [status.exitstatus, status.termsig]]
  end
end
