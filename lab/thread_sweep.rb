# frozen_string_literal: true

# Does `gvlscope advise` pick the thread count a load test would? Puma under wrk with three
# endpoint mixes (lab/thread_sweep_mixes.rb: CPU-heavy, IO-heavy, mixed). For each mix:
#
#   1. one traced run at Puma's default thread count (5 on CRuby) under load; `gvlscope advise`'s
#      model (GVLScope::Analysis::Advisor) reads that trace and recommends a thread count;
#   2. the sweep: a fresh untraced Puma per thread count (1..16, and the recommended count),
#      each under the same load, rounds alternating up and down the counts so drift on the
#      machine hits every count alike; requests/s and p99 latency from wrk.
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
out_dir = ENV["GVLSCOPE_OUTPUT"] ? File.dirname(ENV["GVLSCOPE_OUTPUT"]) : Dir.tmpdir
server_program = File.join(__dir__, "thread_sweep_server.rb")

# The sweep's servers run untraced: RUBYOPT without gvlscope's autorun (bundler's setup stays).
untraced_rubyopt = ENV.fetch("RUBYOPT", "").split.reject { |option| option == "-rgvlscope/autorun" }.join(" ")
lib = File.expand_path("../lib", __dir__)
traced_rubyopt = "#{untraced_rubyopt} -I#{lib} -rgvlscope/autorun"
$LOAD_PATH.unshift(lib) # the advisor reads the traces here (run alone: `ruby lab/thread_sweep.rb`)

DELAY_SERVER = <<~'RUBY'
  require "socket"
  $stdout.sync = true
  server = TCPServer.new("127.0.0.1", 0)
  puts server.addr[1]
  loop do
    client = server.accept
    Thread.new(client) do |connection|
      while (line = connection.gets)
        sleep(Float(line) / 1000)
        connection.write("ok\n")
      end
    rescue IOError, SystemCallError
      nil
    ensure
      connection.close
    end
  end
RUBY

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
delay_pid, delay_port, = spawn_helper(DELAY_SERVER)
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
    # 1. The advisor's run: Puma at its default thread count, traced from boot.
    trace = File.join(out_dir, "sweep-puma-#{mix}.gvl") # not thread-sweep-*: the runner reads that one as the scenario's own
    File.delete(trace) if File.exist?(trace)
    traced_env = { "RUBYOPT" => traced_rubyopt, "GVLSCOPE_OUTPUT" => trace, "GVLSCOPE_LAB_RESULT" => nil, "GVLSCOPE_LIVE" => "1" }
    args[2] = DEFAULT_THREADS.to_s
    pid, port, reader = start_server(traced_env, [*server_cpu, *args])
    begin
      run_wrk.(port, 1) # warm up
      # The same run read live too: two snapshots of its socket inside the measured wrk run.
      traced_seconds = [seconds, 2].max
      load = Thread.new { run_wrk.(port, traced_seconds) }
      sleep 0.25
      live = GVLScope::Live.source(pid: pid)
      earlier = live.snapshot
      queued_before = GVLScope::Analysis::AdvisorInputs.cpu_wait_by_name(pid)
      sleep traced_seconds - 0.5
      queued_after = GVLScope::Analysis::AdvisorInputs.cpu_wait_by_name(pid)
      later = live.snapshot
      live.close
      traced = load.value
    ensure
      stop_server(pid, reader)
    end
    report = GVLScope::Analysis::Report.new(GVLScope::Model.timeline(trace))
    workload = GVLScope::Analysis::AdvisorInputs.from_report(report)
    advice = GVLScope::Analysis::Advisor.new(workload, cores: puma_cores, processes: 1).advice
    # As `gvlscope advise --pid` reads it: the live interval, and the pool's run-queue wait in it.
    live_workload = GVLScope::Analysis::AdvisorInputs.from_live(later, earlier, source: "pid #{pid}")
    live_workload.cpu_wait_ns = GVLScope::Analysis::AdvisorInputs.pool_cpu_wait_ns(queued_before, queued_after,
                                                                                 live_workload.pool_labels)
    live_advice = GVLScope::Analysis::Advisor.new(live_workload, cores: puma_cores, processes: 1).advice
    runqueue_share = live_workload.cpu_wait_ns.to_f / live_workload.total_ns
    shares = workload.shares
    say format("%-9s advisor, from %d threads traced (%.0f requests/s): run %.0f%%, wait %.0f%%, idle %.0f%%, gc %.0f%%; " \
               "GVL held %.0f%%; 1/run share %.1f -> %d threads (live: %d); CPU run-queue wait %.0f%% " \
               "(the live advice without it: %s threads)",
               mix, workload.threads, traced[:rps], 100 * shares[:run], 100 * shares[:wait], 100 * shares[:idle],
               100 * shares[:gc], 100 * workload.held_ratio, advice.no_collision_threads, advice.threads, live_advice.threads,
               100 * runqueue_share, live_advice.sensitivity[:without_cpu_wait].inspect)

    # 2. The sweep, the recommended count included.
    swept = (counts + [advice.threads]).uniq.sort
    points = swept.to_h { |threads| [threads, { rps: [], p99_ms: [], errors: 0 }] }
    rounds.times do |round|
      (round.even? ? swept : swept.reverse).each do |threads|
        args[2] = threads.to_s
        pid, port, reader = start_server({ "RUBYOPT" => untraced_rubyopt, "GVLSCOPE_OUTPUT" => nil }, [*server_cpu, *args])
        begin
          run_wrk.(port, warm_up) if warm_up.positive? # connections, Puma's threads, the method caches
          measured = run_wrk.(port, seconds)
        ensure
          stop_server(pid, reader)
        end
        point = points[threads]
        point[:rps] << measured[:rps]
        point[:p99_ms] << measured[:p99_ms]
        point[:errors] += measured[:errors]
        loads << load_average.()
        say format("%-9s round %d: %2d threads %8.1f requests/s  p99 %8.1f ms%s", mix, round + 1, threads, measured[:rps],
                   measured[:p99_ms], measured[:errors].positive? ? "  (#{measured[:errors]} errors)" : "")
      end
    end
    results[mix] = {
      endpoints: endpoints.map { |endpoint| endpoint.transform_keys(&:to_s) },
      advisor: { threads: advice.threads, from_threads: workload.threads, pool: workload.pool,
                 no_collision_threads: advice.no_collision_threads.round(2), run_share: advice.run_share.round(4),
                 shares: shares.transform_values { |share| share.round(4) }, held_ratio: workload.held_ratio.round(4),
                 traced_rps: traced[:rps], trace: trace, live_threads: live_advice.threads,
                 live_no_collision_threads: live_advice.no_collision_threads.round(2),
                 runqueue_share: runqueue_share.round(4), live_threads_without_runqueue: live_advice.sensitivity[:without_cpu_wait] },
      points: points.transform_keys(&:to_s),
    }
  end
ensure
  stop_helper(delay_pid)
end
loads.compact!
result(mixes: results, cores: Etc.nprocessors, load_average: loads.empty? ? nil : [loads.min, loads.sum / loads.size, loads.max].map { |l| l.round(1) }, counts: counts, seconds: seconds, rounds: rounds, connections: CONNECTIONS,
       default_threads: DEFAULT_THREADS, pinning: pinning, puma_cores: puma_cores)
