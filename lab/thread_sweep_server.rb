# frozen_string_literal: true

# The Puma server of the thread-sweep scenario (lab/thread_sweep.rb), one process per measured
# thread count: `ruby lab/thread_sweep_server.rb THREADS MIX ITERATIONS_PER_MS DELAY_PORT`.
# Prints "port N" once it listens, serves until TERM. Each request does the work of its mix
# (THREAD_SWEEP_MIXES): CPU work holding the GVL (a countdown loop sized to the machine) and IO
# (a read from the delay server, which answers after the asked milliseconds: a database or
# HTTP call's round trip without its CPU). Where gvlscope is loaded, GVLScope::Rack counts each
# endpoint as a route.
require "socket"
require_relative "puma_boot"
require_relative "thread_sweep_mixes"

threads = Integer(ARGV.fetch(0))
mix = ThreadSweepMixes::MIXES.fetch(ARGV.fetch(1))
iterations_per_ms = Integer(ARGV.fetch(2))
delay_port = Integer(ARGV.fetch(3))
$stdout.sync = true

countdown = lambda do |count|
  count -= 1 while count.positive?
end

# One connection to the delay server per Puma thread, kept open: the request's IO is the wait
# for the answer, not a connect.
delay = lambda do |ms|
  socket = (Thread.current[:thread_sweep_delay] ||= TCPSocket.new("127.0.0.1", delay_port))
  socket.write("#{ms}\n")
  socket.gets or raise "the delay server closed the connection"
end

random = Random.new(42)
app = lambda do |env|
  # Endpoints in the mix's proportions (a shared Random is fine: its state changes under the GVL).
  endpoint = mix.size == 1 ? mix.first : mix[random.rand(mix.size)]
  env["thread_sweep.endpoint"] = endpoint[:name]
  countdown.call((endpoint[:cpu_ms] * iterations_per_ms).round) if endpoint[:cpu_ms].positive?
  delay.call(endpoint[:io_ms]) if endpoint[:io_ms].positive?
  [200, { "content-type" => "text/plain" }, [endpoint[:name]]]
end

# The advisor's runs load gvlscope (-rgvlscope/autorun, GVLSCOPE_LIVE=1): there the app counts its
# requests per endpoint as a Rack app would per route, and the live socket serves those numbers.
# The sweep's own runs load no gvlscope.
app = GVLScope::Rack.new(app, route: ->(env) { env["thread_sweep.endpoint"] }) if defined?(GVLScope::Metrics)
server = PumaBoot.start(app, min_threads: threads, max_threads: threads)
port = server.port
puts "port #{port}"
stop = Queue.new
trap(:TERM) { stop << true }
stop.pop
server.stop
