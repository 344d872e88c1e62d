# frozen_string_literal: true

# Thread workloads whose GVL behaviour is known, shared by tests that run them in-process and
# tests that trace them in a child Ruby (which requires this file).
module GVLWorkloads
  module_function

  def clock = Process.clock_gettime(Process::CLOCK_MONOTONIC)

  # A thread that keeps the GVL busy for +seconds+ (released only at the end of each timeslice).
  def cpu_thread(name, seconds)
    Thread.new do
      Thread.current.name = name
      deadline = clock + seconds
      x = 0
      x += 1 while clock < deadline
    end
  end

  # A CPU-bound thread named +cpu_name+ beside a thread named "reader" that reads a pipe +reads+
  # times, a byte every 10 ms: the reader waits for the GVL after each read.
  def cpu_beside_reader(cpu_name, reads)
    cpu = Thread.new do
      Thread.current.name = cpu_name
      x = 0
      x += 1 until Thread.current[:stop]
    end
    from_main, to_reader = IO.pipe
    reader = Thread.new do
      Thread.current.name = "reader"
      reads.times { from_main.read(1) }
    end
    reads.times do
      to_reader.write("x")
      sleep 0.01
    end
    reader.join
    cpu[:stop] = true
    cpu.join
    [from_main, to_reader].each(&:close)
  end

  # +count+ round trips through a thread named "echo" over two pipes: each read blocks, so each
  # wakes a thread up. Yields (before the echo thread ends) so a caller can look at it.
  def echo_round_trips(count)
    to_echo, from_main = IO.pipe
    to_main, from_echo = IO.pipe
    echo = Thread.new do
      Thread.current.name = "echo"
      while (message = to_echo.read(4))
        from_echo.write(message)
      end
    end
    count.times do
      from_main.write("ping")
      to_main.read(4)
    end
    seen = yield if block_given?
    from_main.close
    echo.join
    [to_echo, to_main, from_echo].each(&:close)
    seen
  end
end
