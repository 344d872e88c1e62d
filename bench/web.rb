# frozen_string_literal: true

# What the web integrations cost a server: Puma (single mode, 5 threads) serving hello-world
# (test/fixtures/web/app.ru, path "/") under `wrk -c 20 -d 10 -t 2`, in three setups:
#
#   plain     no gvlscope at all
#   metrics   `use GVLScope::Rack` (Server-Timing on every response) + `plugin :gvlscope` with
#             /metrics served and scraped once a second, as Prometheus would
#   recorder  the same + the flight recorder (10 s ring; thresholds no request reaches)
#
# The setups alternate (plain, metrics, recorder, plain, ...) for ROUNDS rounds so a noisy
# neighbour hits all of them alike; each row reports the median requests/s. Installs wrk with
# apt-get if it is missing (only this benchmark needs it). "paired" is the median of each run's
# ratio to the plain run of its round: steadier than the ratio of medians on a shared machine.
# "CPU us/request" is the server process's CPU time (all threads) per request served: what
# gvlscope adds to each request, less sensitive to neighbours than requests/s.
#
#   bundle exec ruby -Ilib bench/web.rb          (ROUNDS=3 DURATION=10 by default)
#   SAME_PROCESS=1 ROUNDS=10 DURATION=4 bundle exec ruby -Ilib bench/web.rb   (one Puma, switched)
require "net/http"
require "rbconfig"
require "tmpdir"
require "timeout"
require "etc"
require_relative "../lib/gvlscope/support/units"
require_relative "puma_config"

ROOT = File.expand_path("..", __dir__)
ROUNDS = Integer(ENV.fetch("ROUNDS", 3))
DURATION = Integer(ENV.fetch("DURATION", 10))

def ensure_wrk
  return if system("command -v wrk >/dev/null")

  sudo = Process.uid.zero? ? [] : ["sudo"]
  system(*sudo, "apt-get", "update", "-qq") &&
    system(*sudo, "env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "-qq", "wrk") or
    abort("bench/web.rb: could not install wrk with apt-get")
end

ALL_SETUPS = {
  plain: { env: { "GVLSCOPE_MIDDLEWARE" => "0" }, plugin: false },
  metrics: { env: {}, plugin: true },
  recorder: { env: { "GVLSCOPE_FLIGHT_OVER_MS" => "100000" }, plugin: true, recorder: true },
  # To split the cost: the hook alone (metrics on, nothing per request), the middleware alone.
  hook: { env: { "GVLSCOPE_MIDDLEWARE" => "hook" }, plugin: false },
  middleware: { env: {}, plugin: false },
  no_server_timing: { env: { "GVLSCOPE_SERVER_TIMING" => "0" }, plugin: false },
  # No gvlscope, but the app adds a Server-Timing header as long as the middleware's.
  static_header: { env: { "GVLSCOPE_MIDDLEWARE" => "0", "GVLSCOPE_STATIC_SERVER_TIMING" => "1" }, plugin: false },
}.freeze
# SETUPS=plain,hook,middleware picks rows (plain, metrics, recorder by default).
SETUPS = ALL_SETUPS.slice(*ENV.fetch("SETUPS", "plain,metrics,recorder").split(",").map(&:to_sym))
# SAME_PROCESS=1: one Puma serves plain, metrics and recorder in turn, switched at run time between
# load runs (no Puma plugin: it cannot be switched). Boots differ from each other by more than the
# 2 % measured here (the same setup gave 7,000 and 9,100 req/s from two boots), so this is the
# sharper comparison of the middleware + hook and of the recorder.
SAME_PROCESS = ENV["SAME_PROCESS"] == "1"
# TOGGLED=plain,hook,middleware_only,metrics splits the cost (see test/fixtures/web/app.ru).
# PIN=1: Puma on CPU 0, wrk on CPU 1 (taskset), so that they stop trading places on the two cores,
# which is most of the run-to-run spread.
PIN = ENV["PIN"] == "1"
SERVER_CPU = PIN ? %w[taskset -c 0] : [].freeze
CLIENT_CPU = PIN ? %w[taskset -c 1] : [].freeze
TOGGLED = ENV.fetch("TOGGLED", "plain,metrics,recorder").split(",").map(&:to_sym).freeze

def boot(dir, name, setup)
  config = write_puma_config(File.join(dir, "#{name}.rb"),
                             "quiet\n#{"plugin :gvlscope\ngvlscope log_interval: 0, prometheus_port: 0" if setup[:plugin]}")
  env = setup[:env].dup
  env["GVLSCOPE_FLIGHT_DIR"] = File.join(dir, "dumps") if setup[:recorder]
  log = File.join(dir, "#{name}.log")
  pid = Process.spawn(env, *SERVER_CPU, RbConfig.ruby, "-I", File.join(ROOT, "lib"), Gem.bin_path("puma", "puma"), "-C", config,
                      out: log, err: %i[child out], pgroup: true)
  Timeout.timeout(60) { sleep 0.05 until File.read(log).match?(/Listening on/) }
  text = File.read(log)
  [pid, Integer(text[%r{Listening on http://127\.0\.0\.1:(\d+)}, 1]), text[%r{metrics on http://127\.0\.0\.1:(\d+)}, 1]]
end

# CPU time (user + system, all threads) of a process: what the server spent, whatever the
# neighbours did to its wall-clock throughput.
def cpu_seconds(pid)
  utime, stime = File.read("/proc/#{pid}/stat").split(") ").last.split[11, 2].map(&:to_i)
  (utime + stime).fdiv(Etc.sysconf(Etc::SC_CLK_TCK))
end

# One wrk run against a server already up: [requests/s, server CPU us per request].
def load_run(pid, port, metrics_port = nil)
  system(*CLIENT_CPU, "wrk", "-c", "20", "-d", "2", "-t", "2", "http://127.0.0.1:#{port}/", out: File::NULL) # warm up
  scraper = metrics_port && Thread.new do
    loop do
      Net::HTTP.get(URI("http://127.0.0.1:#{metrics_port}/metrics"))
      sleep 1
    end
  end
  cpu_before = cpu_seconds(pid)
  output = IO.popen([*CLIENT_CPU, "wrk", "-c", "20", "-d", DURATION.to_s, "-t", "2", "http://127.0.0.1:#{port}/"], &:read)
  requests = Integer(output[/(\d+) requests in/, 1])
  [Float(output[/Requests\/sec:\s+([\d.]+)/, 1]), (cpu_seconds(pid) - cpu_before) * 1e6 / requests]
ensure
  scraper&.kill
end

def shutdown(pid)
  Process.kill(:TERM, -pid)
  Process.wait(pid)
end

def measure(name, setup, dir)
  pid, port, metrics_port = boot(dir, name, setup)
  load_run(pid, port, metrics_port)
ensure
  shutdown(pid) if pid
end

ensure_wrk
results = Hash.new { |h, k| h[k] = [] }
cpu_per_request = Hash.new { |h, k| h[k] = [] }
Dir.mktmpdir("gvlscope-bench-web") do |dir|
  if SAME_PROCESS
    # One Puma for all setups, switched between runs (test/fixtures/web/app.ru, GVLSCOPE_TOGGLE).
    pid, port, = boot(dir, "toggled", { env: { "GVLSCOPE_MIDDLEWARE" => "0", "GVLSCOPE_TOGGLE" => "1" }, plugin: false,
                                            recorder: true })
    begin
      ROUNDS.times do |round|
        TOGGLED.each do |name|
          Net::HTTP.get(URI("http://127.0.0.1:#{port}/__gvlscope/#{name}"))
          rps, cpu_us = load_run(pid, port)
          results[name] << rps
          cpu_per_request[name] << cpu_us
          warn format("round %d %-10s %9.0f req/s %7.1f us CPU/request", round + 1, name, rps, cpu_us)
        end
      end
    ensure
      shutdown(pid)
    end
  else
    ROUNDS.times do |round|
      SETUPS.each do |name, setup|
        rps, cpu_us = measure(name, setup, dir)
        results[name] << rps
        cpu_per_request[name] << cpu_us
        warn format("round %d %-10s %9.0f req/s %7.1f us CPU/request", round + 1, name, rps, cpu_us)
      end
    end
  end
  dumps = Dir[File.join(dir, "dumps", "*.gvl")].size
  warn "flight recorder dumps written during the runs: #{dumps}"
end

base = GVLScope::Units.median(results[:plain] || results.values.first)
# Paired: each run against the plain run of the same round, so a neighbour's load that comes and
# goes between rounds cancels out; the median of those ratios.
paired = lambda do |values|
  return nil unless results[:plain]

  GVLScope::Units.median(values.zip(results[:plain]).map { |value, plain| value / plain })
end
puts "ruby #{RUBY_VERSION}, puma #{Gem.loaded_specs['puma']&.version}, #{`nproc`.strip} CPUs, " \
     "wrk -c 20 -d #{DURATION} -t 2, #{ROUNDS} rounds"
puts format("%-10s %12s %9s %9s %14s   %s", "setup", "median rps", "vs plain", "paired", "CPU us/request", "runs")
results.each do |name, values|
  ratio = paired.call(values)
  puts format("%-10s %12.0f %8.1f%% %9s %14.1f   %s", name, GVLScope::Units.median(values), 100.0 * GVLScope::Units.median(values) / base,
              ratio ? format("%.1f%%", 100 * ratio) : "-", GVLScope::Units.median(cpu_per_request[name]), values.map(&:round).join(", "))
end
