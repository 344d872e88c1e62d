# frozen_string_literal: true

# Writes gvl-tracing JSON laid out as gvl-tracing 1.7 writes it (ext/gvl_tracing.c, lib/gvl-tracing.rb):
# "[", a process_name line, then each event as an "E" line ending the thread's previous state and a
# "B" line naming its new one, then thread_name lines and "]". Timestamps are microseconds with 6
# decimals ("%f"). For the streaming importer's tests and bench/report.rb: traces of any size.
#
# The program it describes: +threads+ threads hand the GVL around (wants_gvl, running, waiting),
# the next one running just after the previous one waits, every 1024th turn at the same time (a tie
# across threads: the .gvl writer starts a chunk for it); the
# first thread collects garbage inside a hold every 16 turns; every 97th pair of lines is written
# in the wrong order, as gvl-tracing's unlocked writers do. With +os_view+, the OS threads view's
# events (pid 0) are interleaved.
module SyntheticGvlTracing
  PID = 4242

  module_function

  # Writes about +events+ B events; returns how many thread state events it wrote.
  def write(path, events:, threads: 4, os_view: false)
    states = 0
    File.open(path, "w") do |io|
      lines = []
      flush = lambda do
        io.write(lines.join)
        lines.clear
      end
      event = lambda do |tid, ts, name, pid = PID|
        stamp = format("%.6f", ts)
        lines << %(  {"ph": "E", "pid": #{pid}, "tid": #{tid}, "ts": #{stamp}},\n)
        lines << %(  {"ph": "B", "pid": #{pid}, "tid": #{tid}, "ts": #{stamp}, "name": "#{name}"},\n)
        states += 1 if pid == PID && name != "started_tracing" && name != "stopped_tracing"
        if (lines.size % 194).zero? # written out of time order: swap the last two events
          lines[-4], lines[-3], lines[-2], lines[-1] = lines[-2], lines[-1], lines[-4], lines[-3]
        end
        flush.call if lines.size >= 4096
      end
      io.write("[\n")
      io.write(%(  {"ph": "M", "pid": #{PID}, "name": "process_name", "args": {"name": "Ruby threads view (3.3.8)"}},\n))
      event.call(0, 0.0, "started_tracing")
      lines << %(  {"ph": "M", "pid": 0, "name": "process_name", "args": {"name": "OS threads view"}},\n) if os_view
      ts = 5.0
      (1...threads).each { |tid| event.call(tid, ts += 1.25, "started") }
      turn = 0
      while states < events
        tid = turn % threads
        hold = 2.0 + 0.5 * (turn % 7)
        event.call(tid, ts, "running")
        if tid.zero? && (turn % 16).zero?
          event.call(tid, ts + hold / 3, "gc")
          event.call(tid, ts + 2 * hold / 3, "running")
        end
        event.call(tid, ts + 0.2, "Thread #{tid} (a)", 0) if os_view
        ts += hold
        event.call(tid, ts, "waiting")
        ts += 0.125 unless (turn % 1024).zero? # the next thread runs then; every 1024th turn at this very time: a tie
        event.call(tid, ts + 0.75 + 0.25 * (turn % 3), "wants_gvl")
        turn += 1
      end
      (1...threads).each { |tid| event.call(tid, ts += 1.0, "died") }
      event.call(0, ts + 1.0, "stopped_tracing")
      flush.call
      names = (0...threads).map do |tid|
        name = tid.zero? ? "Main Thread" : "worker #{tid}"
        %(  {"ph": "M", "pid": #{PID}, "tid": #{tid}, "name": "thread_name", "args": {"name": "#{name}"}})
      end
      io.write(names.join(",\n"), "\n]\n")
    end
    states
  end
end
