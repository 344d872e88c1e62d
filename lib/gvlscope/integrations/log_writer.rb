# frozen_string_literal: true

module GVLScope
  # Writes the slow-request and slow-job lines (`log_wait_over_ms:`) on a thread of its own. A
  # request that wrote its line itself would give up the GVL in the write (or wait on the logger's
  # lock) and so be delayed further by the very wait it reports: it only hands the line over.
  # The queue is bounded, so a log that cannot keep up costs no memory: lines beyond it are
  # dropped and counted, and once the queue is written out one more line says how many.
  class LogWriter
    CAPACITY = 1000
    THREAD_NAME = "gvlscope log" # "gvlscope ..." threads are left out of the findings (Live::Rules)
    EXIT_FLUSH_SECONDS = 1 # lines still queued at exit get this long to be written

    # The writer the integrations share (one thread per process).
    def self.shared = @shared ||= new

    def initialize(capacity: CAPACITY)
      @capacity = capacity
      @lock = Mutex.new
      @dropped = 0
      @pid = nil
      @thread = nil
      @exit_hook = false
    end

    # Lines dropped so far because the queue was full.
    def dropped = @lock.synchronize { @dropped }

    # Queues +line+ for +logger+ (#warn; nil: $stderr) and returns at once: true when queued,
    # false when the queue was full (the line is dropped and counted).
    def write(line, logger = nil)
      queue = running_queue
      queue.push([logger, line], true)
      true
    rescue ThreadError # full: never make the request wait for the log
      @lock.synchronize { @dropped += 1 }
      false
    end

    # Waits until the lines queued before this call are written (at most +timeout+ seconds);
    # true when they were.
    def flush(timeout = EXIT_FLUSH_SECONDS)
      return true unless @thread&.alive? && @pid == Process.pid

      done = Thread::Queue.new
      deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout
      return false unless @queue.push([:flush, done], timeout: timeout) # waits while full, not for ever (at exit)

      !done.pop(timeout: [deadline - Process.clock_gettime(Process::CLOCK_MONOTONIC), 0].max).nil?
    end

    private

    # The queue of this process's writer thread, started at the first line (and again in a
    # forked child, where the parent's thread does not run).
    def running_queue
      return @queue if @pid == Process.pid && @thread.alive?

      @lock.synchronize do
        unless @pid == Process.pid && @thread&.alive?
          @queue = Thread::SizedQueue.new(@capacity)
          @thread = start_thread(@queue)
          @pid = Process.pid
          at_exit { flush } unless @exit_hook
          @exit_hook = true
        end
      end
      @queue
    end

    def start_thread(queue)
      Thread.new do
        Thread.current.name = THREAD_NAME
        Thread.current.report_on_exception = false
        last_logger = nil
        loop do
          logger, line = queue.pop
          if logger == :flush
            report_dropped(last_logger)
            line.push(true) # line: the flusher's queue
          else
            write_now(last_logger = logger, line)
            report_dropped(logger) if queue.empty? # the burst is written: say what it lost
          end
        end
      end
    end

    def report_dropped(logger)
      dropped = @lock.synchronize { @dropped.tap { @dropped = 0 } }
      return if dropped.zero?

      lines = dropped == 1 ? "1 slow-request line was" : "#{dropped} slow-request lines were"
      write_now(logger, "gvlscope: #{lines} dropped: the log did not keep up")
    end

    def write_now(logger, line)
      logger ? logger.warn(line) : $stderr.puts(line)
    rescue StandardError
      nil # a logger that fails loses its line, never the writer
    end
  end
end
