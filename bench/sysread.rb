# frozen_string_literal: true

# The workload of the issues, shared by the benchmarks: one thread calling File#sysread(16) on
# /dev/zero +calls+ times (each call releases and retakes the GVL: SUSPENDED, READY, RESUMED).
# Returns the calling thread's CPU seconds, which is where every hook runs.
def sysread_cpu_seconds(calls)
  File.open("/dev/zero") do |zero|
    started = Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID)
    calls.times { zero.sysread(16) }
    Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) - started
  end
end
