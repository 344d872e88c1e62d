# frozen_string_literal: true

# What code locations cost (docs/performance.md, "Stacks"): a trace with stacks against one
# without, alternating in one process, ROUNDS rounds, medians.
# 1. Per release site: one thread calls File#sysread(16) CALLS times while, in another Ractor,
#    two CPU-bound threads keep one of them waiting for that Ractor's GVL (the recorder counts
#    waiters of every Ractor), so every sysread records its site. The calling thread's CPU time,
#    the difference divided by the sites recorded.
# 2. A mixed workload (the convoy): 2 CPU threads and 4 threads echoing through pipes for SECONDS;
#    throughput = CPU loop iterations and round trips done, with stacks relative to without.
# 3. Bytes: records and the stacks chunk, per site and per sample, from the traces of 2.
#
#   bundle exec ruby -Ilib bench/stacks.rb   (CALLS=200000 ROUNDS=7 SECONDS=2)
require "gvlscope"
require "gvlscope/model"
require "gvlscope/support/units"
require "tmpdir"
require_relative "sysread"

CALLS = Integer(ENV.fetch("CALLS", 200_000))
ROUNDS = Integer(ENV.fetch("ROUNDS", 7))
SECONDS = Float(ENV.fetch("SECONDS", 2))

def sysreads = sysread_cpu_seconds(CALLS)

def mixed
  stop = false
  cpu = 2.times.map { Thread.new { n = 0; n += 1 until stop; n } }
  trips = 4.times.map do
    Thread.new do
      a, b = IO.pipe
      c, d = IO.pipe
      echo = Thread.new { while (m = a.read(4)) do d.write(m) end }
      n = 0
      until stop
        b.write("ping")
        c.read(4)
        n += 1
      end
      b.close
      echo.join
      n
    end
  end
  sleep SECONDS
  stop = true
  [cpu.sum(&:value), trips.sum(&:value)]
end

def traced(path, stacks)
  result = nil
  GVLScope.trace(path, stacks: stacks) { result = yield }
  [result, GVLScope::Model::TraceFile.index(path)]
end

Warning[:experimental] = false
Dir.mktmpdir("gvlscope-stacks-bench") do |dir|
  site_costs = []
  sites = nil
  waiting = Ractor.new { 2.times.map { Thread.new { x = 0; loop { x += 1 } } }.each(&:join) }
  sleep 0.3 # its threads take turns: one of them always waits
  ROUNDS.times do
    off, = traced(File.join(dir, "p0.gvl"), false) { sysreads }
    on, file = traced(File.join(dir, "p1.gvl"), true) { sysreads }
    sites = file.stack_counts[:sites]
    site_costs << (on - off) / sites * 1e9
  end

  ratios_cpu = []
  ratios_io = []
  files = nil
  ROUNDS.times do
    (off_cpu, off_io), off_file = traced(File.join(dir, "m0.gvl"), false) { mixed }
    (on_cpu, on_io), on_file = traced(File.join(dir, "m1.gvl"), true) { mixed }
    ratios_cpu << on_cpu.fdiv(off_cpu)
    ratios_io << on_io.fdiv(off_io)
    files = [off_file, on_file, File.size(File.join(dir, "m1.gvl"))]
  end

  puts "Ruby #{RUBY_DESCRIPTION}; median of #{ROUNDS} rounds"
  puts
  puts format("- per release site: %.0f ns (%d of %d sysread calls recorded their site)", GVLScope::Units.median(site_costs), sites, CALLS)
  puts format("- mixed workload (2 CPU threads, 4 echo threads, %.0f s), with stacks / without: CPU iterations %.3f, " \
              "round trips %.3f", SECONDS, GVLScope::Units.median(ratios_cpu), GVLScope::Units.median(ratios_io))
  _off, on, size = files
  counts = on.stack_counts
  data = File.binread(File.join(dir, "m1.gvl"))
  offset = 48
  chunk = 0
  while offset + 8 <= data.bytesize
    type, bytes = data.unpack("L<L<", offset: offset)
    chunk = bytes + 8 if type == 4
    offset += 8 + bytes
  end
  puts format("- last mixed trace with stacks: %d bytes, %d sites (8 bytes each), %d samples (16 bytes each), " \
              "stacks chunk %d bytes (%d locations, %d stacks interned)", size, counts[:sites], counts[:samples], chunk,
              on.instance_variable_get(:@stacks).values.flatten.uniq.size, on.instance_variable_get(:@stacks).size)
  $stdout.flush
  exit! 0 # the waiting Ractor's threads never end
end
