# frozen_string_literal: true

# What GVLScope::Rack adds to one request, in-process (no server, no client): a hello-world app
# called N times bare and through the middleware (with and without the Server-Timing header),
# alternating in ROUNDS rounds; thread CPU time per call, medians, and objects allocated per call.
#
#   bundle exec ruby -Ilib bench/middleware.rb          (N=200000 ROUNDS=7 by default)
require "rack"
require "gvlscope/rack"
require "gvlscope/support/units"

N = Integer(ENV.fetch("N", 200_000))
ROUNDS = Integer(ENV.fetch("ROUNDS", 7))

APP = ->(_env) { [200, { "content-type" => "text/plain" }, ["ok"]] }
SETUPS = {
  bare: APP,
  middleware: GVLScope::Rack.new(APP),
  no_server_timing: GVLScope::Rack.new(APP, server_timing: false),
}.freeze

def cpu_clock = Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID)

def per_call_ns(app)
  env = { "REQUEST_METHOD" => "GET", "PATH_INFO" => "/" }
  started = cpu_clock
  N.times { app.call(env) }
  (cpu_clock - started) * 1e9 / N
end

def allocations_per_call(app)
  env = { "REQUEST_METHOD" => "GET", "PATH_INFO" => "/" }
  app.call(env)
  before = GC.stat(:total_allocated_objects)
  1000.times { app.call(env) }
  (GC.stat(:total_allocated_objects) - before) / 1000.0
end

times = Hash.new { |h, k| h[k] = [] }
SETUPS.each_value { |app| per_call_ns(app) } # warm up
ROUNDS.times { SETUPS.each { |name, app| times[name] << per_call_ns(app) } }
bare = GVLScope::Units.median(times[:bare])
puts "ruby #{RUBY_VERSION}, rack #{Rack.release}, #{N} calls x #{ROUNDS} rounds, thread CPU time"
puts format("%-17s %10s %12s %14s", "setup", "ns/call", "added ns", "objects/call")
SETUPS.each do |name, app|
  t = GVLScope::Units.median(times[name])
  puts format("%-17s %10.0f %12s %14.1f", name, t, name == :bare ? "-" : format("%.0f", t - bare), allocations_per_call(app))
end
