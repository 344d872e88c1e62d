# frozen_string_literal: true

# What recording costs: one thread calling File#sysread(16) on /dev/zero CALLS times (each call
# releases and retakes the GVL: SUSPENDED, READY, RESUMED), untraced and traced, alternating in
# one process, ROUNDS rounds; medians reported (the added cost as the median of per-round differences). Time is the CPU time of the thread doing the
# calls, which is where every hook runs: on a shared 2-core VM wall time of runs this short swings
# by ±20 % with neighbours. The trace writer's own CPU time (another thread, 64 KiB write(2)s) is
# not in it; bench/instructions.rb counts instructions, which no neighbour can disturb. Then the trace's size per event and the time to
# export it to Chrome JSON and Perfetto.
#
#   BUNDLE_GEMFILE=bench/Gemfile bundle exec ruby -Ilib bench/overhead.rb
#   (CALLS=1000000 ROUNDS=15 by default; the gvl-tracing and gvltools rows appear when those gems
#   are installed: BUNDLE_GEMFILE=bench/Gemfile bundle install)
#
# Rows: untraced; empty-hook (a hook that only counts: the floor any hook pays); metrics
# (GVLScope::Metrics on); gvltools (its GlobalTimer, LocalTimer and WaitingThreads on); gvlscope
# (tracing to a file, stacks: false); gvlscope-stacks (the same with stacks, the default);
# gvl-tracing (tracing to its JSON).
require "gvlscope"
require "gvlscope/model"
require "gvlscope/support/units"
require "gvlscope/formats/chrome_json"
require "gvlscope/formats/perfetto"
require "tmpdir"
require_relative "sysread"

CALLS = Integer(ENV.fetch("CALLS", 1_000_000))
ROUNDS = Integer(ENV.fetch("ROUNDS", 15))
EVENTS_PER_CALL = 3
# ONLY=metrics,gvltools runs just those rows (and the untraced baseline), for a longer, focused run.
ONLY = ENV["ONLY"]&.split(",")&.map(&:to_sym)
def run?(mode) = ONLY.nil? || ONLY.include?(mode)

def clock = Process.clock_gettime(Process::CLOCK_MONOTONIC)
def workload = sysread_cpu_seconds(CALLS)


%w[gvl-tracing gvltools].each do |peer|
  require peer
rescue LoadError
  warn "#{peer} not installed: its row is skipped (BUNDLE_GEMFILE=bench/Gemfile bundle install)"
end

dir = Dir.mktmpdir("gvlscope-bench")
trace_path = File.join(dir, "bench.gvl")
stacks_path = File.join(dir, "bench-stacks.gvl")
times = Hash.new { |h, k| h[k] = [] }
sizes = {}
events = {}
workload # warm up
ROUNDS.times do |round|
  $stderr.print "\rround #{round + 1}/#{ROUNDS}"
  times[:untraced] << workload

  # The floor: a hook that only counts events (GVLScope::Probe), no clock, no buffer.
  if run?(:empty_hook)
    counts = GVLScope::Probe.count { times[:empty_hook] << workload }
    events[:empty_hook] = counts.values.sum
    sizes[:empty_hook] = 0
  end

  if run?(:metrics)
    GVLScope::Metrics.enable
    times[:metrics] << workload
    events[:metrics] = GVLScope::Metrics.snapshot.then { |m| m.holds + m.waits + m.releases }
    sizes[:metrics] = 0
    GVLScope::Metrics.disable
  end

  if defined?(GVLTools) && run?(:gvltools)
    [GVLTools::GlobalTimer, GVLTools::LocalTimer, GVLTools::WaitingThreads].each(&:enable)
    times[:gvltools] << workload
    [GVLTools::GlobalTimer, GVLTools::LocalTimer, GVLTools::WaitingThreads].each(&:disable)
    events[:gvltools] = CALLS * EVENTS_PER_CALL
    sizes[:gvltools] = 0
  end

  if run?(:gvlscope)
    FileUtils.rm_f(trace_path) # a trace never overwrites a file: each round's is new
    GVLScope.start(trace_path, stacks: false)
    times[:gvlscope] << workload
    summary = GVLScope.stop
    events[:gvlscope] = summary.events
    sizes[:gvlscope] = File.size(trace_path)
    abort "gvlscope dropped #{summary.dropped} events" if summary.dropped.positive?
  end

  # With stacks (the default): nobody waits here, so no frame is read; the waiting count is kept.
  if run?(:gvlscope_stacks)
    FileUtils.rm_f(stacks_path) # its own file: the row above's trace is read after the rounds
    GVLScope.start(stacks_path)
    times[:gvlscope_stacks] << workload
    summary = GVLScope.stop
    events[:gvlscope_stacks] = summary.events
    sizes[:gvlscope_stacks] = File.size(stacks_path)
  end

  next unless defined?(GvlTracing) && run?(:gvl_tracing)

  json_path = File.join(dir, "bench.json")
  GvlTracing.start(json_path)
  times[:gvl_tracing] << workload
  GvlTracing.stop
  sizes[:gvl_tracing] = File.size(json_path)
  events[:gvl_tracing] = CALLS * EVENTS_PER_CALL
end
$stderr.puts

base = GVLScope::Units.median(times[:untraced])
# Paired: each round's mode minus the same round's untraced run, then the median of those. Slow
# drifts of the machine (a neighbour starting, frequency changes) cancel within a round.
def paired_ns_per_event(times, name, events)
  GVLScope::Units.median(times[name].zip(times[:untraced]).map { |with, without| (with - without) * 1e9 / events })
end
puts "Ruby #{RUBY_DESCRIPTION}; #{CALLS} sysread calls; median of #{ROUNDS} rounds"
puts
puts "| run | thread CPU time (s) | ns per call | events | added ns per event (paired) | bytes per event |"
puts "|---|---:|---:|---:|---:|---:|"
puts format("| untraced | %.3f | %.0f | - | - | - |", base, base * 1e9 / CALLS)
times.each do |name, values|
  next if name == :untraced

  t = GVLScope::Units.median(values)
  n = events[name]
  puts format("| %s | %.3f | %.0f | %d | %.1f | %s |", name.to_s.tr("_", "-"), t, t * 1e9 / CALLS, n,
              paired_ns_per_event(times, name, n), sizes[name].zero? ? "-" : format("%.1f", sizes[name].to_f / n))
end

if run?(:gvlscope)
  started = clock
  timeline = GVLScope::Model.timeline(trace_path, spill: true)
  read_s = clock - started
  started = clock
  File.open(File.join(dir, "bench.chrome.json"), "wb") { |io| GVLScope::Formats::ChromeJSON.new(timeline).write(io) }
  chrome_s = clock - started
  started = clock
  File.open(File.join(dir, "bench.pftrace"), "wb") { |io| GVLScope::Formats::Perfetto.new(timeline).write(io) }
  perfetto_s = clock - started
  puts
  puts format("Reading the %d-event trace into a timeline: %.2f s; Chrome JSON export: %.2f s (%.1f MB); " \
              "Perfetto export: %.2f s (%.1f MB)", events[:gvlscope], read_s, chrome_s,
              File.size(File.join(dir, "bench.chrome.json")) / 1e6, perfetto_s, File.size(File.join(dir, "bench.pftrace")) / 1e6)
end

# A snapshot of 100 live threads (all blocked on a queue), median of 101.
GVLScope::Metrics.enable
queue = Queue.new
sleepers = 100.times.map { Thread.new { queue.pop } }
sleep 0.1
snapshot_us = 101.times.map do
  started = clock
  GVLScope::Metrics.snapshot
  (clock - started) * 1e6
end
100.times { queue << :go }
sleepers.each(&:join)
GVLScope::Metrics.disable
puts format("Metrics snapshot with 100 threads: %.0f us (median of 101)", GVLScope::Units.median(snapshot_us))
FileUtils.rm_rf(dir)
