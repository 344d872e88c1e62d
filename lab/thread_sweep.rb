# frozen_string_literal: true

# Does `gvlscope advise` pick the thread count a load test would? Puma under wrk with three
# endpoint mixes (lab/thread_sweep_mixes.rb: CPU-heavy, IO-heavy, mixed). For each mix:
#
#   1. one traced run at Puma's default thread count (5 on CRuby) under load; `gvlscope advise`'s
#      model (GVLScope::Analysis::Advisor) reads that trace: its answer is shown, not judged;
#   2. the rounds: each starts with an untraced Puma at the default count whose live socket the
#      advisor reads (as `gvlscope advise --pid` does), then sweeps a fresh untraced Puma per
#      thread count (1..16, and the counts advised so far), each under the same load, rounds
#      alternating up and down the counts so drift on the machine hits every count alike;
#      requests/s and p99 latency from wrk. The judged count is the median of the rounds' advice:
#      one reading at one moment of a shared machine is not the app (docs/advise.md, "The lab").
#
# The knee and the verdicts are computed from these numbers in lib/gvlscope/lab/sweep.rb. With 2+
# cores, wrk and the delay server run on the last CPU (taskset) and Puma anywhere
# (THREAD_SWEEP_PIN=client, the default): Puma's threads coming back from a syscall find a core
# while another holds the GVL, as on a server with cores to spare. THREAD_SWEEP_PIN=apart puts
# Puma on CPU 0 alone (its own threads then queue for that core: measured as idle, see
# docs/advise.md), none pins nothing. The sweep judges threads in one process: the advisor is
# told 1 core, so its process advice stays out of it.
require_relative "lab_helper"
require_relative "thread_sweep_mixes"
require "etc"
require "tmpdir"
include LabHelper

begin
  require "puma"
rescue LoadError
  say "skipped: the puma gem is not installed (it is in gvlscope's Gemfile: run under `bundle exec`)"
  result(skipped: "puma gem not installed")
  exit
end
find = ->(name) { ENV.fetch("PATH", "").split(File::PATH_SEPARATOR).map { |dir| File.join(dir, name) }.find { |path| File.executable?(path) } }
wrk = find.("wrk")
unless wrk
  say "skipped: wrk is not installed (Debian: apt-get install wrk)"
  result(skipped: "wrk not installed")
  exit
end

DEFAULT_THREADS = 5 # Puma's default max_threads on CRuby (Rails' generated config says 3)
CONNECTIONS = 32 # twice the most threads swept: every thread always has a request to serve
counts = size(tiny: [1, 16], small: [1, 2, 3, 4, 6, 8, 12, 16], full: [1, 2, 3, 4, 6, 8, 12, 16])
seconds = size(tiny: 1, small: 2, full: 5)
rounds = size(tiny: 1, small: 1, full: 5)
warm_up = size(tiny: 0, small: 1, full: 2)
mixes = ENV.fetch("THREAD_SWEEP_MIXES", ThreadSweepMixes::MIXES.keys.join(",")).split(",")
taskset = find.("taskset")
pin = Etc.nprocessors >= 2 && taskset ? ENV.fetch("THREAD_SWEEP_PIN", "client") : "none"
unless %w[client apart none].include?(pin)
  raise ArgumentError, "THREAD_SWEEP_PIN must be client, apart or none (got #{pin.inspect})"
end
last_cpu = (Etc.nprocessors - 1).to_s
server_cpu = pin == "apart" ? [taskset, "-c", "0"] : []
client_cpu = pin == "none" ? [] : [taskset, "-c", last_cpu]
pinning = { "client" => "wrk and the delay server on CPU #{last_cpu}, Puma on any",
            "apart" => "Puma on CPU 0, wrk and the delay server on CPU #{last_cpu}", "none" => "nothing pinned" }.fetch(pin)
puma_cores = 1
# Beside the scenario's own trace (the lab's private directory, whose traces it puts in place), or
# a new directory when run alone: the recorder never writes over a file.
out_dir = ENV["GVLSCOPE_OUTPUT"] ? File.dirname(ENV["GVLSCOPE_OUTPUT"]) : Dir.mktmpdir("gvlscope-sweep-")
server_program = File.join(__dir__, "thread_sweep_server.rb")

# The sweep's servers run untraced: RUBYOPT without gvlscope's autorun (bundler's setup stays).
untraced_rubyopt = ENV.fetch("RUBYOPT", "").split.reject { |option| option == "-rgvlscope/autorun" }.join(" ")
lib = File.expand_path("../lib", __dir__)
traced_rubyopt = "#{untraced_rubyopt} -I#{lib} -rgvlscope/autorun"
$LOAD_PATH.unshift(lib) # the advisor reads the traces here (run alone: `ruby lab/thread_sweep.rb`)

# Starts a Puma server process; returns [pid, port, its stdout reader].
def start_server(env, command)
  reader, writer = IO.pipe
  pid = Process.spawn(env, *command, out: writer, pgroup: true)
  writer.close
  line = reader.gets or raise "the Puma server (#{command.join(' ')}) died before it listened"
  [pid, Integer(line[/\Aport (\d+)/, 1]), reader]
end

def stop_server(pid, reader)
  Process.kill(:TERM, pid)
  Process.wait(pid)
  reader.close
end

# wrk's latency (e.g. "12.34ms", "850.00us", "1.20s") in ms.
def wrk_ms(text)
  value = Float(text[/[\d.]+/])
  case text[/[a-z]+\z/]
  when "us" then value / 1000
  when "ms" then value
  when "s" then value * 1000
  when "m" then value * 60_000
  else raise "unknown wrk latency unit in #{text.inspect}"
  end
end

# One wrk run: requests/s, p99 latency in ms, and errors (socket errors + non-2xx).
run_wrk = lambda do |port, duration|
  output = IO.popen([*client_cpu, wrk, "-c", CONNECTIONS.to_s, "-t", "2", "-d", duration.to_s, "--latency",
                     "http://127.0.0.1:#{port}/"], err: %i[child out], &:read)
  rps = output[%r{Requests/sec:\s+([\d.]+)}, 1] or raise "wrk printed no requests/s:\n#{output}"
  p99 = output[/^\s+99%\s+(\S+)/, 1] or raise "wrk printed no p99:\n#{output}"
  errors = output.scan(/(?:connect|read|write|timeout) (\d+)/).sum { |(count)| Integer(count) } +
           output[/Non-2xx or 3xx responses: (\d+)/, 1].to_i
  { rps: Float(rps), p99_ms: wrk_ms(p99), errors: errors }
end

require "gvlscope/model"
require "gvlscope/analysis/report"
require "gvlscope/analysis/advisor_inputs"
require "gvlscope/live"
# Loop iterations per ms of this thread's CPU time (not wall time: other processes on a busy
# machine must not change what "4 ms of Ruby" is); the best of 3.
iterations_per_ms = 3.times.map do
  count = 2_000_000
  started = Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID)
  countdown(count)
  (count / ((Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) - started) * 1000)).round
end.max
# The machine's speed now, against the fastest seen in this run: the best of three 10 ms loops'
# wall times. This project's VM has phases of half a minute to minutes in which the same Ruby takes
# 20-40 % longer (the host's other work; the guest sees no steal time): a measurement with the
# machine below SLOW of its fastest before or after it is taken again, up to MAX_TRIES times.
PROBE_MS = 10
SLOW = 0.85
MAX_TRIES = 3
fastest = 0.0
probe = lambda do
  speed = 3.times.map do
    started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    countdown(iterations_per_ms * PROBE_MS)
    PROBE_MS / ((Process.clock_gettime(Process::CLOCK_MONOTONIC) - started) * 1000)
  end.max
  fastest = [fastest, speed].max
  speed
end
retries = Hash.new(0) # mix => measurements taken again
# The block's measurement, taken while the machine ran at SLOW of its fastest (or the last of
# MAX_TRIES); returns [its value, the machine's speed then as a share of its fastest].
at_speed = lambda do |mix, what, &block|
  tries = 0
  loop do
    before = probe.()
    value = block.()
    relative = [before, probe.()].min / fastest
    tries += 1
    return [value, relative] if relative >= SLOW || tries >= MAX_TRIES

    retries[mix] += 1
    say format("%-9s %s: the machine ran at %.0f %% of its fastest: measured again", mix, what, 100 * relative)
  end
end
untraced_env = { "RUBYOPT" => untraced_rubyopt, "GVLSCOPE_OUTPUT" => nil }
# The advisor's runs: untraced, but with the live socket (metrics only: no trace file, no stacks).
live_env = { "RUBYOPT" => traced_rubyopt, "GVLSCOPE_OUTPUT" => nil, "GVLSCOPE_TRACE" => "0", "GVLSCOPE_LAB_RESULT" => nil,
             "GVLSCOPE_LIVE" => "1" }
# Runs one Puma (+server_args+, +env+) and yields its port and pid; returns the block's value.
run_server = lambda do |server_args, env = untraced_env, &block|
  pid, port, reader = start_server(env, [*server_cpu, *server_args])
  begin
    block.(port, pid)
  ensure
    stop_server(pid, reader)
  end
end
# One wrk run of +duration+ s with two snapshots of the live socket inside it (0.25 s after its
# start, 0.25 s before its end) and the threads' schedstat at both: CPU time and run-queue wait.
read_under_load = lambda do |port, pid, duration|
  load = Thread.new { run_wrk.(port, duration) }
  sleep 0.25
  live = GVLScope::Live.source(pid: pid)
  earlier = live.snapshot
  cpu_before = GVLScope::Analysis::AdvisorInputs.schedstat_by_name(pid, :cpu)
  queued_before = GVLScope::Analysis::AdvisorInputs.schedstat_by_name(pid, :run_queue)
  sleep duration - 0.5
  queued_after = GVLScope::Analysis::AdvisorInputs.schedstat_by_name(pid, :run_queue)
  cpu_after = GVLScope::Analysis::AdvisorInputs.schedstat_by_name(pid, :cpu)
  later = live.snapshot
  live.close
  { wrk: load.value, pid: pid, earlier: earlier, later: later, queued: [queued_before, queued_after], cpu: [cpu_before, cpu_after] }
end
# `gvlscope advise --pid`'s answer on one read_under_load, and the numbers behind it.
advise_live = lambda do |reading|
  workload = GVLScope::Analysis::AdvisorInputs.from_live(reading[:later], reading[:earlier], source: "pid #{reading[:pid]}")
  workload.cpu_wait_ns = GVLScope::Analysis::AdvisorInputs.pool_schedstat_ns(*reading[:queued], workload.pool_labels)
  workload.cpu_ns = cpu_ns = GVLScope::Analysis::AdvisorInputs.pool_schedstat_ns(*reading[:cpu], workload.pool_labels)
  advice = GVLScope::Analysis::Advisor.new(workload, cores: puma_cores, processes: 1).advice
  requests = reading[:wrk][:rps] * workload.window_ns / 1e9 # wrk's rate over the snapshots' window
  { threads: advice.threads, rps: reading[:wrk][:rps], no_collision_threads: advice.no_collision_threads.round(2),
    shares: workload.shares.transform_values { |share| share.round(4) }, held_ratio: workload.held_ratio.round(4),
    run_ms_per_request: (workload.run_ns / 1e6 / requests).round(3),
    cpu_ms_per_request: cpu_ns && (cpu_ns / 1e6 / requests).round(3),
    runqueue_share: (workload.cpu_wait_ns.to_f / workload.total_ns).round(4),
    io_overlap_share: (workload.io_overlap_wait_ns.to_f / workload.total_ns).round(4),
    threads_without_io_overlap: advice.sensitivity[:without_io_overlap],
    threads_without_runqueue: advice.sensitivity[:without_cpu_wait],
    # Per endpoint (GVLScope::Rack's routes), the model's D and Z in ms, and the answer as one mean request.
    kinds: advice.kinds&.map do |kind|
      { label: kind.label, share: kind.share.round(3), hold_ms: (kind.demand / 1e6).round(3), idle_ms: (kind.idle / 1e6).round(3) }
    end,
    threads_as_one_kind: advice.sensitivity[:one_kind] }
end
live_run = lambda do |mix, server_args|
  run, speed = at_speed.(mix, "advisor's reading") do
    advise_live.(run_server.(server_args, live_env) { |port, pid| run_wrk.(port, 1); read_under_load.(port, pid, [seconds, 2].max) })
  end
  run.merge(speed: speed.round(3))
end
delay_pid, delay_port, = spawn_helper(LabHelper::DELAY_SERVER)
say "Puma #{Puma::Const::PUMA_VERSION}; wrk -c #{CONNECTIONS} -t 2 -d #{seconds}; #{rounds} round(s); " \
    "#{pinning}; #{iterations_per_ms} iterations/ms"
# The machine's load average while the sweep ran (Linux): other work on it is the sweep's noise.
load_average = -> { File.read("/proc/loadavg").split.first.to_f rescue nil } # rubocop:disable Style/RescueModifier
loads = [load_average.()]
results = {}
begin
  mixes.each do |mix|
    endpoints = ThreadSweepMixes::MIXES.fetch(mix)
    args = [RbConfig.ruby, server_program, nil, mix, iterations_per_ms.to_s, delay_port.to_s]
    # 1. The trace's run: Puma at its default thread count, traced from boot (its answer is shown beside).
    trace = File.join(out_dir, "thread-sweep-puma-#{mix}.gvl") # thread-sweep-*: among the scenario's traces the lab keeps
    traced_env = { "RUBYOPT" => traced_rubyopt, "GVLSCOPE_OUTPUT" => trace, "GVLSCOPE_LAB_RESULT" => nil, "GVLSCOPE_LIVE" => "1" }
    args[2] = DEFAULT_THREADS.to_s
    traced = run_server.(args, traced_env) do |port, pid|
      run_wrk.(port, 1) # warm up
      read_under_load.(port, pid, [seconds, 2].max) # the same run read live too
    end
    report = GVLScope::Analysis::Report.new(GVLScope::Model.timeline(trace))
    workload = GVLScope::Analysis::AdvisorInputs.from_report(report)
    advice = GVLScope::Analysis::Advisor.new(workload, cores: puma_cores, processes: 1).advice
    traced_live = advise_live.(traced)
    shares = workload.shares
    say format("%-9s trace, %d threads (%.0f requests/s): run %.0f%%, wait %.0f%%, idle %.0f%%, gc %.0f%%; " \
               "GVL held %.0f%%; 1/run share %.1f -> %d threads (read live from the same run: %d)",
               mix, workload.threads, traced[:wrk][:rps], 100 * shares[:run], 100 * shares[:wait], 100 * shares[:idle],
               100 * shares[:gc], 100 * workload.held_ratio, advice.no_collision_threads, advice.threads, traced_live[:threads])

    # 2. The sweep, interleaved with the advisor's own runs: each round starts with one untraced
    # Puma at the default count whose live socket the advisor reads (metrics only: no trace file,
    # no stacks), then sweeps the counts. The verdict judges the median of these rounds' advice;
    # a count the advisor named is swept from the round it first appears in, and topped up to
    # every round's worth at the end.
    points = Hash.new { |hash, threads| hash[threads] = { rps: [], p99_ms: [], errors: 0 } }
    measure = lambda do |threads, round|
      measured, speed = at_speed.(mix, "#{threads} threads") do
        run_server.(args.dup.tap { |a| a[2] = threads.to_s }) do |port, _pid|
          run_wrk.(port, warm_up) if warm_up.positive? # connections, Puma's threads, the method caches
          run_wrk.(port, seconds)
        end
      end
      point = points[threads]
      point[:rps] << measured[:rps]
      point[:p99_ms] << measured[:p99_ms]
      point[:errors] += measured[:errors]
      point[:speed] = [point[:speed], speed].compact.min
      loads << load_average.()
      say format("%-9s round %d: %2d threads %8.1f requests/s  p99 %8.1f ms%s", mix, round, threads, measured[:rps],
                 measured[:p99_ms], measured[:errors].positive? ? "  (#{measured[:errors]} errors)" : "")
    end
    live_runs = []
    rounds.times do |round|
      live_runs << live_run.(mix, args.dup.tap { |a| a[2] = DEFAULT_THREADS.to_s })
      run = live_runs.last
      say format("%-9s round %d: advisor, %d threads read live (%.0f requests/s): run %.0f%%, wait %.0f%%, idle %.0f%%; " \
                 "GVL held %.0f%%; 1/run share %.1f -> %d threads; pool's CPU %.2f ms and GVL run %.2f ms per request; " \
                 "CPU run-queue wait %.0f%% (without it: %s); IO in flight during GVL wait %.0f%% (as wait: %s)%s",
                 mix, round + 1, DEFAULT_THREADS, run[:rps],
                 100 * run[:shares][:run], 100 * run[:shares][:wait], 100 * run[:shares][:idle], 100 * run[:held_ratio],
                 run[:no_collision_threads], run[:threads], run[:cpu_ms_per_request] || Float::NAN, run[:run_ms_per_request],
                 100 * run[:runqueue_share], run[:threads_without_runqueue].inspect, 100 * run[:io_overlap_share].to_f,
                 run[:threads_without_io_overlap].inspect,
                 run[:kinds] ? "; per endpoint #{run[:kinds].map { |k| format('%s D %.2f ms Z %.2f ms', k[:label], k[:hold_ms], k[:idle_ms]) }.join(', ')} " \
                               "(as one mean request: #{run[:threads_as_one_kind]})" : "")
      swept = (counts + live_runs.map { |live| live[:threads] }).uniq.sort
      (round.even? ? swept : swept.reverse).each { |threads| measure.(threads, round + 1) }
    end
    recommended = GVLScope::Units.median(live_runs.map { |run| run[:threads] }) # one of the measured counts
    (rounds - points[recommended][:rps].size).times { measure.(recommended, rounds) }
    results[mix] = {
      endpoints: endpoints.map { |endpoint| endpoint.transform_keys(&:to_s) },
      advisor: { threads: recommended, from_threads: DEFAULT_THREADS, live_runs: live_runs,
                 trace: { threads: advice.threads, from_threads: workload.threads, pool: workload.pool,
                          no_collision_threads: advice.no_collision_threads.round(2), run_share: advice.run_share.round(4),
                          shares: shares.transform_values { |share| share.round(4) }, held_ratio: workload.held_ratio.round(4),
                          rps: traced[:wrk][:rps], path: trace, live: traced_live } },
      points: points.sort.to_h.transform_keys(&:to_s),
      # Measurements taken again because the machine ran slow, and the slowest speed kept (share of its fastest).
      retries: retries[mix], slowest_kept: points.values.filter_map { |point| point[:speed] }.min&.round(3),
    }
  end
ensure
  stop_helper(delay_pid)
end
loads.compact!
result(mixes: results, cores: Etc.nprocessors, load_average: loads.empty? ? nil : [loads.min, loads.sum / loads.size, loads.max].map { |l| l.round(1) }, counts: counts, seconds: seconds, rounds: rounds, connections: CONNECTIONS,
       default_threads: DEFAULT_THREADS, pinning: pinning, puma_cores: puma_cores, slow: SLOW,
       # The fastest probe against the sizing loop (1.0: as fast as when the endpoints were sized;
       # 1.6: their "4 ms" of Ruby took 2.5 ms at the machine's fastest).
       fastest_speed: fastest.round(3))
