# frozen_string_literal: true

# Balázs Kutil's "DTracing the Ruby GVL": a hello-world Rack app on Puma (0-16 threads) under
# `wrk -c 20 -d 10 -t 10` on loopback. Published (MRI 2.6, a patched Ruby with DTrace probes):
# GVL hold times mostly 4-64 us (82% in 8-32 us), 8-15 threads waiting at each acquire. This
# process is the Puma server (traced); wrk runs in its own process. Held %, the hold-time and
# waiters-at-acquire histograms are read from the trace (lib/gvlscope/lab/scenarios.rb).
require_relative "lab_helper"
include LabHelper

begin
  require_relative "puma_boot"
rescue LoadError
  say "skipped: the puma gem is not installed (it is in gvlscope's Gemfile: run under `bundle exec`)"
  result(skipped: "puma gem not installed")
  exit
end
wrk = ENV.fetch("PATH", "").split(File::PATH_SEPARATOR).map { |dir| File.join(dir, "wrk") }.find { |path| File.executable?(path) }
unless wrk
  say "skipped: wrk is not installed (Debian: apt-get install wrk)"
  result(skipped: "wrk not installed")
  exit
end

app = ->(_env) { [200, { "content-type" => "text/html" }, ["Hello World!"]] }
server = PumaBoot.start(app, min_threads: 0, max_threads: 16, timeout_s: 10)
port = server.port

duration = size(tiny: 1, small: 3, full: 10)
say "wrk -c 20 -d #{duration} -t 10 http://127.0.0.1:#{port}/"
output = IO.popen([wrk, "-c", "20", "-d", duration.to_s, "-t", "10", "--latency", "http://127.0.0.1:#{port}/"], &:read)
server.stop
requests_per_s = output[/Requests\/sec:\s+([\d.]+)/, 1].to_f
say output.lines.grep(/Requests\/sec|Latency  /).join
result(requests_per_s: requests_per_s, wrk_seconds: duration, puma_threads: 16, connections: 20)
