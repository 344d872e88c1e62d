# frozen_string_literal: true

# Where a request's IO goes when the GVL is busy: `bundle exec ruby research/io_overlap.rb`. One thread
# asks a delay server for 9 ms of IO the way the thread-sweep's IO endpoint does (write the ask,
# then read the answer), 40 times, beside a neighbour thread that holds the GVL for 0, 4 or 100 ms
# at a time. gvlscope's counters of the asking thread split each ask into the GVL wait inside the
# write (the write returns at once, then the thread waits for the GVL to come back), the idle
# inside the read, and the wait after it. docs/advise.md ("Why the mixed mix missed") reads it: the
# delay server's 9 ms pass while the thread waits for the GVL after its write, so the idle the
# read shows is shorter by that wait, and `gvlscope advise` reads less IO than the request does.
$LOAD_PATH.unshift(File.expand_path("../lib", __dir__))
require "gvlscope"
require "socket"
require_relative "../lab/lab_helper"

DELAY_MS = 9
ASKS = 40
NEIGHBOUR_HOLDS_MS = [0, 4, 100].freeze

# The delay server, in its own process (its threads would share our GVL).
delay_pid, port, = LabHelper.spawn_helper(LabHelper::DELAY_SERVER)

clock = -> { Process.clock_gettime(Process::CLOCK_MONOTONIC) }
me = -> { GVLScope::Metrics.current_thread }
ms = ->(ns) { ns / 1e6 }
GVLScope::Metrics.enable
puts "| neighbour holds the GVL for | wait inside the write | idle inside the read | wait after the read | wall per ask | write's wait + read's idle |"
puts "|---|---:|---:|---:|---:|---:|"
begin
  socket = TCPSocket.new("127.0.0.1", Integer(port))
  NEIGHBOUR_HOLDS_MS.each do |hold_ms|
    stop = false
    neighbour = if hold_ms.positive?
                  Thread.new do
                    until stop
                      deadline = clock.() + hold_ms / 1000.0
                      x = 0
                      x += 1 while clock.() < deadline
                      Thread.pass # lets a waiting thread have the GVL between holds
                    end
                  end
                end
    sleep 0.05
    sums = Hash.new(0.0)
    ASKS.times do
      started = clock.()
      before = me.()
      socket.write("#{DELAY_MS}\n")
      written = me.()
      socket.gets
      read = me.()
      sums[:write_wait] += ms.(written.wait_ns - before.wait_ns)
      sums[:read_idle] += ms.(read.idle_ns - written.idle_ns)
      sums[:read_wait] += ms.(read.wait_ns - written.wait_ns)
      sums[:wall] += (clock.() - started) * 1000
    end
    stop = true
    neighbour&.join
    mean = sums.transform_values { |sum| sum / ASKS }
    puts format("| %d ms | %.2f ms | %.2f ms | %.2f ms | %.2f ms | %.2f ms |", hold_ms, mean[:write_wait], mean[:read_idle],
                mean[:read_wait], mean[:wall], mean[:write_wait] + mean[:read_idle])
  end
ensure
  LabHelper.stop_helper(delay_pid)
end
