# frozen_string_literal: true

require "timeout"

# The callgrind driver of the instruction benchmarks (bench/instructions.rb and
# bench/*_instructions.rb): instruction counts, the same on a busy machine as on an idle one.
module Callgrind
  module_function

  def available? = system("command -v valgrind >/dev/null")

  def require!
    abort "valgrind not found (apt-get install valgrind)" unless available?
  end

  # The instructions a whole run of +command+ executes (valgrind's "I refs"); aborts with the end
  # of valgrind's output when it counted none (the program failed to start).
  def instructions(*command, env: {})
    out = IO.popen(env, ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *command], err: %i[child out],
                   &:read)
    refs = out[/refs:\s+([\d,]+)/, 1] or abort "valgrind counted nothing: #{command.join(' ')}\n#{out.lines.last(20).join}"
    Integer(refs.delete(","))
  end

  # A long-running process (a server) under callgrind, counted in windows.
  class Session
    attr_reader :pid

    # +dir+: where its dumps go; +log+: its output.
    def initialize(env, command, dir:, log:)
      @dir = dir
      @pid = Process.spawn(env, "valgrind", "--tool=callgrind", "--callgrind-out-file=#{dir}/callgrind.%p", *command,
                           out: log, err: %i[child out])
    end

    # The instructions the process executes while the block runs: zeroed before, dumped after.
    def window(name)
      control("--zero")
      yield
      before = dumps
      control("--dump=#{name}")
      dump = nil
      Timeout.timeout(60) { sleep 0.2 until (dump = (dumps - before).first) }
      sleep 0.5 # let the dump finish writing
      Integer(File.read(dump)[/^(?:summary|totals): (\d+)/, 1])
    end

    def stop
      Process.kill(:KILL, @pid)
      Process.wait(@pid)
    end

    private

    def dumps = Dir[File.join(@dir, "callgrind.#{@pid}.*")]

    def control(option)
      system("callgrind_control", option, @pid.to_s, %i[out err] => File::NULL) or abort "callgrind_control #{option} failed"
    end
  end

  def session(env, *command, dir:, log:) = Session.new(env, command, dir: dir, log: log)
end
