# frozen_string_literal: true

# The convoy effect in a few lines: an "IO" thread echoing small messages through a pipe, first
# alone, then beside a CPU-bound thread. Every blocking read makes it give up the GVL, and with
# a CPU-bound neighbour it waits about a whole timeslice (100 ms) to get it back.
#
# CPU_IN=process runs the same CPU-bound work in a forked process instead: the fix, with a GVL of
# its own. `gvlscope diff` compares the two traces (docs/diff.md).

def echo_round_trips(count)
  to_echo, from_main = IO.pipe
  to_main, from_echo = IO.pipe
  echo = Thread.new do
    while (message = to_echo.read(4))
      from_echo.write(message)
    end
  end
  echo.name = "echo"
  started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
  count.times do
    from_main.write("ping")
    to_main.read(4)
  end
  elapsed = Process.clock_gettime(Process::CLOCK_MONOTONIC) - started
  from_main.close
  echo.join
  [to_echo, to_main, from_echo].each(&:close)
  elapsed
end

def cpu_bound_neighbour
  thread = Thread.new do
    counter = 0
    counter += 1 while Thread.current[:stop].nil?
  end
  thread.name = "cpu"
  thread
end

# The fix: the same loop in a child process, stopped by closing a pipe (it exits on its own, so a
# traced child writes a whole trace).
def cpu_bound_process
  stop, stopping = IO.pipe
  pid = fork do
    stopping.close
    counter = 0
    counter += 1 while counter % 1_000_000 != 0 || stop.read_nonblock(1, exception: false) == :wait_readable
  end
  stop.close
  [pid, stopping]
end

ROUND_TRIPS = Integer(ENV.fetch("ROUND_TRIPS", 10))
IN_PROCESS = ENV.fetch("CPU_IN", "thread") == "process"

alone = echo_round_trips(ROUND_TRIPS)
$stdout.puts format("%d round trips alone:            %8.2f ms each", ROUND_TRIPS, alone * 1000 / ROUND_TRIPS)

if IN_PROCESS
  pid, stopping = cpu_bound_process
  with_cpu = echo_round_trips(ROUND_TRIPS)
  stopping.close
  Process.wait(pid)
  $stdout.puts format("%d round trips beside a CPU process: %7.2f ms each", ROUND_TRIPS, with_cpu * 1000 / ROUND_TRIPS)
else
  cpu = cpu_bound_neighbour
  with_cpu = echo_round_trips(ROUND_TRIPS)
  cpu[:stop] = true
  cpu.join
  $stdout.puts format("%d round trips beside a CPU thread: %8.2f ms each", ROUND_TRIPS, with_cpu * 1000 / ROUND_TRIPS)
end
