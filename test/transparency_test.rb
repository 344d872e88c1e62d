# frozen_string_literal: true

require "test_helper"
require "tmpdir"

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

  # traces: how many processes write a trace; stopped: false when a process ends without running
  # at_exit (exit!), leaving a trace without its end (and perhaps without events).
  Program = Struct.new(:source, :ruby_args, :traces, :stopped, keyword_init: true) do
    def initialize(stopped: true, **) = super
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
    "exit_bang" => Program.new(traces: 1, stopped: false, source: <<~'RUBY'),
      at_exit { puts "never printed" }
      puts "before exit!"
      $stdout.flush
      exit!(5)
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

  private

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
      traces.each do |trace|
        file = GVLScope::Model::TraceFile.read(trace)
        next unless program.stopped

        refute file.truncated?, trace
        assert_operator file.size, :>, 0, trace
      end
    end
  end

  def capture(command, dir)
    Open3.popen3(ENV_OF_BOTH, *command, chdir: dir) do |stdin, stdout, stderr, waiter|
      stdin.close
      out = Thread.new { stdout.read }
      err = Thread.new { stderr.read }
      unless waiter.join(TIMEOUT)
        Process.kill(:KILL, waiter.pid)
        flunk "#{command.join(' ')} did not finish in #{TIMEOUT} s"
      end
      status = waiter.value
      [out.value, err.value, [status.exitstatus, status.termsig]]
    end
  end
end
