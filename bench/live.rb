# frozen_string_literal: true

# What `gvlscope top` costs the process it watches: the CPU time of a target with its live socket
# open, with and without a client asking for a snapshot (with stacks, as top does) once a second,
# the CPU time of one answer, measured over many back-to-back requests, and how late the host's
# own code gets: a "host" thread in the target sleeps 10 ms in a loop and keeps its latest
# wake-up (the time the answer's thread kept the GVL from it), alone and with the reads.
#
#   bundle exec ruby bench/live.rb [SECONDS] [THREADS]   (default 30 s, 20 threads)
#
# The target's CPU time is read from /proc/PID/stat (utime + stime, all its threads). Its
# threads are what a Puma worker's look like between requests: THREADS-4 blocked on a Queue and 4
# waking every 50 ms, so the baseline is small and the client's share stands out.
require_relative "../lib/gvlscope/live"

seconds = Float(ARGV.fetch(0, 30))
threads = Integer(ARGV.fetch(1, 20))
lib = File.expand_path("../lib", __dir__)
target = <<~RUBY
  require "gvlscope"
  server = GVLScope::LiveServer.start
  queue = Queue.new
  #{threads - 4}.times { |i| Thread.new { Thread.current.name = "pool \#{i}"; queue.pop } }
  4.times { |i| Thread.new { Thread.current.name = "ticker \#{i}"; loop { sleep 0.05 } } }
  late = []
  clock = -> { Process.clock_gettime(Process::CLOCK_MONOTONIC) }
  Thread.new do
    Thread.current.name = "host"
    loop do
      started = clock.()
      sleep 0.01
      late << clock.() - started - 0.01
    end
  end
  # USR1: the wake-ups since the last USR1, as "max p99 count" in ms.
  trap("USR1") do
    seen = late.dup.sort
    late.clear
    $stdout.puts [seen.last.to_f, seen[(seen.size * 0.99).floor].to_f].map { |s| (s * 1000).round(1) }.join(" ") + " \#{seen.size}"
    $stdout.flush
  end
  $stdout.puts server.path
  $stdout.flush
  sleep
RUBY

# utime + stime of all its threads, in clock ticks (1/100 s here: 10 ms resolution, 0.03 % of 30 s).
TICK_NS = 10_000_000
def cpu_ns(pid) = File.read("/proc/#{pid}/stat").split(")").last.split.values_at(11, 12).sum { |t| Integer(t) } * TICK_NS
def now = Process.clock_gettime(Process::CLOCK_MONOTONIC)

reader, writer = IO.pipe
pid = Process.spawn(RbConfig.ruby, "-I", lib, "-e", target, out: writer)
writer.close
path = reader.gets.chomp
client = GVLScope::Live::Client.new(path, pid: pid)
client.snapshot(stacks: true) # connected, and the first answer's one-time loading done
sleep 1
# The host thread's latest and 99th-percentile wake-up since the previous call (ms), and how many.
lateness = lambda do
  Process.kill(:USR1, pid)
  reader.gets.split.then { |latest, p99, count| [Float(latest), Float(p99), Integer(count)] }
end
lateness.call

begin
  # 1. The target alone.
  before = cpu_ns(pid)
  sleep seconds
  alone = cpu_ns(pid) - before
  late_alone = lateness.call

  # 2. The same time with one snapshot a second.
  before = cpu_ns(pid)
  started = now
  requests = 0
  until now - started >= seconds
    client.snapshot(stacks: true)
    requests += 1
    sleep [started + requests - now, 0].max
  end
  watched = cpu_ns(pid) - before
  late_watched = lateness.call

  # 3. Back to back: the CPU time of one answer.
  count = [1000, 200_000 / threads].min # the answer grows with the threads
  before = cpu_ns(pid)
  wall = now
  count.times { client.snapshot(stacks: true) }
  wall = now - wall
  per_request = (cpu_ns(pid) - before - alone * wall / seconds) / count
  bytes = client.snapshot(stacks: true).to_json.bytesize

  puts format("ruby %s, %d threads in the target, %.0f s per phase", RUBY_VERSION, threads, seconds)
  puts format("target CPU alone:                 %8.1f ms (%.3f%% of one core)", alone / 1e6, 100.0 * alone / (seconds * 1e9))
  puts format("target CPU with 1 snapshot/s:     %8.1f ms (%.3f%% of one core), %d snapshots", watched / 1e6,
              100.0 * watched / (seconds * 1e9), requests)
  puts format("difference (the reads' cost):     %8.1f ms = %.3f%% of one core", (watched - alone) / 1e6,
              100.0 * (watched - alone) / (seconds * 1e9))
  puts format("one answer, back to back (x%d):  %8.1f us of target CPU, %d bytes of JSON", count, per_request / 1e3, bytes)
  puts format("  at 1 snapshot/s:                 %.3f%% of one core", per_request / 1e9 * 100)
  puts format("host wake-up late, alone:         max %6.1f ms, p99 %6.1f ms (%d wake-ups)", *late_alone)
  puts format("host wake-up late, 1 snapshot/s:  max %6.1f ms, p99 %6.1f ms (%d wake-ups)", *late_watched)
ensure
  client.close
  Process.kill(:KILL, pid)
  Process.wait(pid)
end
