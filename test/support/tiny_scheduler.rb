# frozen_string_literal: true

# The smallest Fiber scheduler that runs the event-loop tests (test/recorder/event_loop_test.rb):
# tasks are non-blocking fibers resumed by the thread's blocking fiber (the loop), which waits for
# their IO with IO.select and for their sleeps with its timeout, as async's and Falcon's reactor
# does with epoll. Only what the tests use: readable and writable waits, sleep, block/unblock.
class TinyScheduler
  def initialize
    @readable = {}
    @writable = {}
    @sleeping = {} # fiber => when it wakes (CLOCK_MONOTONIC)
    @ready = []
  end

  def fiber(&block)
    Fiber.new(blocking: false, &block).tap(&:resume)
  end

  def io_wait(io, events, _timeout)
    @readable[io] = Fiber.current if events.anybits?(IO::READABLE)
    @writable[io] = Fiber.current if events.anybits?(IO::WRITABLE)
    Fiber.yield
    events
  end

  def kernel_sleep(duration = nil)
    @sleeping[Fiber.current] = clock + (duration || 0)
    Fiber.yield
  end

  def block(_blocker, timeout = nil)
    @sleeping[Fiber.current] = clock + timeout if timeout
    Fiber.yield
  end

  def unblock(_blocker, fiber)
    @ready << fiber
  end

  def close = run

  # The loop: until no task waits, resume those whose IO is ready or whose sleep is over.
  def run
    until @readable.empty? && @writable.empty? && @sleeping.empty? && @ready.empty?
      timeout = @ready.empty? ? @sleeping.values.min&.then { |at| [at - clock, 0].max } : 0
      readable, writable = IO.select(@readable.keys, @writable.keys, nil, timeout)
      due = @ready.shift(@ready.size)
      readable&.each { |io| due << @readable.delete(io) }
      writable&.each { |io| due << @writable.delete(io) }
      now = clock
      @sleeping.select { |_fiber, at| at <= now }.each_key { |fiber| due << fiber.tap { @sleeping.delete(fiber) } }
      due.each { |fiber| fiber.resume if fiber.alive? }
    end
  end

  private

  def clock = Process.clock_gettime(Process::CLOCK_MONOTONIC)
end
