# frozen_string_literal: true

# What the CPU time samples cost (docs/performance.md, "CPU samples"): the drain thread wakes
# every 100 ms and reads each native thread's CPU time (one clock_gettime(2) per native thread),
# writing a record for each whose CPU time changed. For each count of THREADS threads that all
# run a little every 20 ms (so each is written at every sample: the worst case), for SECONDS: the
# trace's CPU chunks (samples, bytes a second, bytes a second per thread) and the drain thread's
# own CPU time a second (/proc/self/task/TID/schedstat; it is the one task the trace starts).
#
#   bundle exec ruby -Ilib bench/cpu_samples.rb   (THREADS=1,10,100 SECONDS=5)
require "gvlscope"
require "gvlscope/model"
require "tmpdir"

THREADS = ENV.fetch("THREADS", "1,10,100").split(",").map { |count| Integer(count) }
SECONDS = Float(ENV.fetch("SECONDS", 5))

def tasks = Dir.children("/proc/self/task").map(&:to_i)
def task_cpu_ns(tid) = File.read("/proc/self/task/#{tid}/schedstat").split.first.to_i

# The CPU chunks' bytes (chunk headers included) and records of the trace at +path+.
def cpu_chunks(path)
  data = File.binread(path)
  offset = data.unpack1("L<", offset: 12) # header_bytes
  bytes = records = 0
  while offset + 8 <= data.bytesize
    type, payload = data.unpack("L<L<", offset: offset)
    if type == GVLScope::Model::TraceFile::CHUNK_CPU
      bytes += 8 + payload
      records += data.unpack1("L<", offset: offset + 16)
    end
    offset += 8 + payload
  end
  [bytes, records]
end

puts "| threads | seconds | samples | records | bytes/s | bytes/s per thread | drain thread CPU per second |"
puts "|---:|---:|---:|---:|---:|---:|---:|"
THREADS.each do |count|
  Dir.mktmpdir("gvlscope-cpu-bench") do |dir|
    stop = false
    workers = Array.new(count) { Thread.new { until stop; sleep 0.02; 200.times { |i| i * i } end } }
    before = tasks
    path = File.join(dir, "t.gvl")
    GVLScope.start(path)
    drain = (tasks - before).first
    cpu_before = task_cpu_ns(drain)
    started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    sleep SECONDS
    cpu_used = task_cpu_ns(drain) - cpu_before
    elapsed = Process.clock_gettime(Process::CLOCK_MONOTONIC) - started
    GVLScope.stop
    stop = true
    workers.each(&:join)
    bytes, records = cpu_chunks(path)
    samples = GVLScope::Model::TraceFile.index(path).cpu_ticks.bytesize / 8
    printf("| %d | %.1f | %d | %d | %.0f | %.0f | %.0f us |\n", count, elapsed, samples, records, bytes / elapsed,
           bytes / elapsed / (count + 1), cpu_used / elapsed / 1000)
  end
end
