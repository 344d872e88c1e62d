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

  # A thread that keeps the GVL busy until it has run +seconds+ of its own CPU time: other
  # processes competing for the cores stretch its wall time, not the Ruby timeslices it needs.
  def cpu_time_thread(name, seconds)
    Thread.new do
      Thread.current.name = name
      deadline = Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) + seconds
      x = 0
      x += 1 while Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) < deadline
    end
  end

  # Counts until stop[0] is set: the method a hog spends its time in, on a line tests know
  # (SPIN_LINE), so a holder profile has a known answer. The loop calls no method that pushes a
  # frame (Integer#+ and Array#[] are VM instructions), so the samples' top frame is this one.
  def spin(stop)
    x = 0
    x += 1 until stop[0] # SPIN_LINE
    x
  end

  SPIN_LINE = File.readlines(__FILE__).index { |line| line.include?("# SPIN_" + "LINE") } + 1

  # A CPU-bound thread named +cpu_name+ (in GVLWorkloads.spin) beside a thread named "reader" that
  # reads a pipe +reads+ times, a byte every 10 ms: the reader waits for the GVL after each read.
  def cpu_beside_reader(cpu_name, reads)
    stop = [false]
    cpu = Thread.new do
      Thread.current.name = cpu_name
      spin(stop)
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
    stop[0] = true
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
