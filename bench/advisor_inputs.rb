# frozen_string_literal: true

# What the thread sweep's advisor reads, and what reading it costs (docs/advise.md, "Does it match
# a load test?"): the lab's Puma server (lab/thread_sweep_server.rb) at one thread count under
# wrk -c 32, once per mode, and per mode the requests/s, and from Linux's schedstat the pool's CPU
# time and run-queue wait per request; with the live socket, the advisor's inputs (GVL run, wait
# and idle per request) and its answer; with a trace, the trace's answer too.
#
#   bundle exec ruby bench/advisor_inputs.rb [MIX] [THREADS] [SECONDS] [MODES]
#   MIX: cpu-heavy, io-heavy (default) or mixed; MODES: untraced,live,trace,trace-nostacks (default all)
#
# Linux only (schedstat, taskset); wrk and the delay server on the last CPU, as in the lab.
$LOAD_PATH.unshift File.expand_path("../lib", __dir__)
require "etc"
require "tmpdir"
require "gvlscope/live"
require "gvlscope/model"
require "gvlscope/analysis/report"
require "gvlscope/analysis/advisor_inputs"
require_relative "../lab/thread_sweep_mixes"
require_relative "../lab/lab_helper"

mix = ARGV.fetch(0, "io-heavy")
threads = Integer(ARGV.fetch(1, "5"))
seconds = Integer(ARGV.fetch(2, "6"))
modes = ARGV.fetch(3, "untraced,live,trace,trace-nostacks").split(",")
ThreadSweepMixes::MIXES.fetch(mix) # an unknown mix: KeyError naming it
lab = File.expand_path("../lab", __dir__)
lib = File.expand_path("../lib", __dir__)
client_cpu = ["taskset", "-c", (Etc.nprocessors - 1).to_s]
inputs = GVLScope::Analysis::AdvisorInputs

# The lab's own loop calibration: iterations of the countdown per ms of this thread's CPU time.
countdown = ->(count) { count -= 1 while count.positive? }
iterations_per_ms = 3.times.map do
  started = Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID)
  countdown.(2_000_000)
  (2_000_000 / ((Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) - started) * 1000)).round
end.max
delay_source = LabHelper::DELAY_SERVER
delay_reader, delay_writer = IO.pipe
delay_pid = Process.spawn(*client_cpu, RbConfig.ruby, "-e", delay_source, out: delay_writer)
delay_writer.close
delay_port = Integer(delay_reader.gets)
wrk = ->(port, duration) { IO.popen([*client_cpu, "wrk", "-c", "32", "-t", "2", "-d", duration.to_s, "http://127.0.0.1:#{port}/"], &:read) }
plain = ENV.fetch("RUBYOPT", "").split.reject { |option| option.include?("gvlscope") }.join(" ")
autorun = "#{plain} -I#{lib} -rgvlscope/autorun"
puts format("%s at %d threads, wrk -c 32 for %d s per mode; %d cores, load average %s; %s",
            mix, threads, seconds, Etc.nprocessors, File.read("/proc/loadavg").split.first, RUBY_DESCRIPTION)
begin
  modes.each do |mode|
    trace = File.join(Dir.tmpdir, "advisor-inputs-#{Process.pid}-#{mode}.gvl")
    env = {
      "untraced" => { "RUBYOPT" => plain },
      "live" => { "RUBYOPT" => autorun, "GVLSCOPE_LIVE" => "1", "GVLSCOPE_TRACE" => "0" },
      "trace" => { "RUBYOPT" => autorun, "GVLSCOPE_LIVE" => "1", "GVLSCOPE_OUTPUT" => trace },
      "trace-nostacks" => { "RUBYOPT" => autorun, "GVLSCOPE_LIVE" => "1", "GVLSCOPE_OUTPUT" => trace, "GVLSCOPE_STACKS" => "0" },
    }.fetch(mode)
    reader, writer = IO.pipe
    pid = Process.spawn(env, RbConfig.ruby, File.join(lab, "thread_sweep_server.rb"), threads.to_s, mix,
                        iterations_per_ms.to_s, delay_port.to_s, out: writer, pgroup: true)
    writer.close
    port = Integer(reader.gets[/\d+/])
    wrk.(port, 1) # warm up
    load = Thread.new { wrk.(port, seconds) }
    sleep 0.25 # the window: inside the wrk run
    live = mode == "untraced" ? nil : GVLScope::Live.source(pid: pid)
    earlier = live&.snapshot
    cpu_before = inputs.schedstat_by_name(pid, :cpu)
    queued_before = inputs.schedstat_by_name(pid, :run_queue)
    started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    sleep seconds - 0.5
    queued_after = inputs.schedstat_by_name(pid, :run_queue)
    cpu_after = inputs.schedstat_by_name(pid, :cpu)
    later = live&.snapshot
    window = Process.clock_gettime(Process::CLOCK_MONOTONIC) - started
    live&.close
    output = load.value
    Process.kill(:TERM, pid)
    Process.wait(pid)
    rps = Float(output[%r{Requests/sec:\s+([\d.]+)}, 1])
    requests = rps * window
    pool = (1..threads).map { |n| format("puma srv tp %03d", n) }
    per_request = ->(ns) { ns / 1e6 / requests }
    line = format("%-14s %7.1f requests/s; the pool's CPU %.2f ms per request, run-queue wait %.0f %% of its time",
                  mode, rps, per_request.(inputs.pool_schedstat_ns(cpu_before, cpu_after, pool)),
                  100.0 * inputs.pool_schedstat_ns(queued_before, queued_after, pool) / (threads * window * 1e9))
    if later
      workload = inputs.from_live(later, earlier, source: "pid #{pid}")
      advice = GVLScope::Analysis::Advisor.new(workload, cores: 1, processes: 1).advice
      line += format("\n%14s live: GVL run %.2f, wait %.2f, idle %.2f ms per request; held %.0f %% -> %d threads",
                     "", per_request.(workload.run_ns), per_request.(workload.wait_ns), per_request.(workload.idle_ns),
                     100 * workload.held_ratio, advice.threads)
    end
    if mode.start_with?("trace")
      workload = inputs.from_report(GVLScope::Analysis::Report.new(GVLScope::Model.timeline(trace)))
      advice = GVLScope::Analysis::Advisor.new(workload, cores: 1, processes: 1).advice
      shares = workload.shares
      line += format("\n%14s trace (boot to exit): run %.0f %%, wait %.0f %%, idle %.0f %%; held %.0f %% -> %d threads; %d KB",
                     "", 100 * shares[:run], 100 * shares[:wait], 100 * shares[:idle], 100 * workload.held_ratio,
                     advice.threads, File.size(trace) / 1024)
      File.delete(trace)
    end
    puts line
  end
ensure
  Process.kill(:TERM, delay_pid)
  Process.wait(delay_pid)
end
