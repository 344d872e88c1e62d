# frozen_string_literal: true

# Dathan Bennett's "Why is Ruby multithreading slow?" (2017): a producer pushes into an unbounded
# Queue and two printers pop and write a line each (one write(2) per line, as on a terminal)
# under a lock. The producer never blocks, so it keeps the GVL for whole timeslices and each
# printer gets one line out per turn: ~10 lines/s published. With SizedQueue(100) the producer
# blocks when the queue is full and 100,000 items went through in ~3.5 s.
require_relative "lab_helper"
include LabHelper

# Two printers writing each item under a lock; returns [lines written, seconds, deepest queue].
def run(queue, producer_name)
  out = File.open(File::NULL, "w")
  out.sync = true # a line per write(2), as on a TTY
  lock = Mutex.new
  lines = 0
  deepest = 0
  started = now
  printers = 2.times.map do |n|
    Thread.new do
      Thread.current.name = "printer #{n}"
      while (item = queue.pop)
        lock.synchronize { out.write("printer #{n}: #{item}\n"); lines += 1 }
      end
    end
  end
  producer = Thread.new do
    Thread.current.name = producer_name
    yield(queue, ->(depth) { deepest = depth if depth > deepest })
    queue.clear if queue.is_a?(Queue) && !queue.is_a?(SizedQueue) # leave what was not printed
    queue.close
  end
  producer.join
  printers.each(&:join)
  [lines, now - started, deepest]
end

window = size(tiny: 0.5, small: 2.0, full: 5.0)
unbounded = run(Queue.new, "producer (Queue)") do |queue, depth|
  deadline = now + window
  i = 0
  while now < deadline
    queue.push(i += 1)
    depth.call(queue.size) if (i % 10_000).zero?
  end
end
say format("unbounded Queue:    %7d lines in %.2f s = %9.1f lines/s; deepest queue %d",
           unbounded[0], unbounded[1], unbounded[0] / unbounded[1], unbounded[2])
items = size(tiny: 5_000, small: 100_000, full: 100_000)
sized = run(SizedQueue.new(100), "producer (SizedQueue)") do |queue, depth|
  items.times { |i| queue.push(i); depth.call(queue.size) if (i % 1000).zero? }
end
say format("SizedQueue(100):    %7d lines in %.2f s = %9.1f lines/s; deepest queue %d",
           sized[0], sized[1], sized[0] / sized[1], sized[2])
result(unbounded_lines_per_s: unbounded[0] / unbounded[1], unbounded_deepest: unbounded[2], sized_items: sized[0],
       sized_s: sized[1], sized_lines_per_s: sized[0] / sized[1], sized_deepest: sized[2])
