# frozen_string_literal: true

# Instructions per Sidekiq job, counted by valgrind (callgrind): what GVLScope::Sidekiq adds to a
# no-op job and to a realistic one (bench/sidekiq_app.rb), in numbers no neighbour on the machine
# can move. One real Sidekiq (the CLI, concurrency 1) runs under callgrind against a real Redis
# (redis-server on a free loopback port); for each setup and job: switch the middleware in or out
# (SetupJob), warm up, zero the counters, JOBS jobs, dump the counters once a MarkJob after them
# has run. ROUNDS rounds, the minimum per setup and job. The count covers all of Sidekiq's work for
# the jobs: fetching from Redis, parsing, logging, the middleware chain, the job, acknowledging.
#
# Beside a no-op job's ~290,000 instructions, the middleware's share is within the noise of
# Sidekiq's own work (its heartbeat and poller threads run in some windows), so PART=chain counts
# it alone: Sidekiq's middleware chain invoked CALLS times in-process, empty and with
# GVLScope::Sidekiq (the difference over CALLS, start-up cancelled by a run of none), exact.
#
#   bundle exec ruby -Ilib bench/sidekiq_instructions.rb     (JOBS=1000 ROUNDS=3 CALLS=20000; needs valgrind, redis-server)
#   PART=chain or PART=sidekiq: one of the two
require "json"
require "rbconfig"
require "securerandom"
require "tmpdir"
require "timeout"
require_relative "../test/support/redis_server"
require_relative "support/callgrind"

ROOT = File.expand_path("..", __dir__)
JOBS = Integer(ENV.fetch("JOBS", 1000))
CALLS = Integer(ENV.fetch("CALLS", 20_000))
PART = ENV.fetch("PART", "both")
ROUNDS = Integer(ENV.fetch("ROUNDS", 3))
SETUPS = %w[plain middleware].freeze
KINDS = { "NoopJob" => [], "ReportJob" => [42] }.freeze

Callgrind.require!
abort "redis-server not found (apt-get install redis-server)" unless RedisServer.available?

def push(redis, klass, *args)
  now_ms = (Time.now.to_f * 1000).to_i
  JSON.generate("class" => klass, "args" => args, "queue" => "default", "jid" => SecureRandom.hex(12), "retry" => false,
                "created_at" => now_ms, "enqueued_at" => now_ms).then { |job| redis.call("LPUSH", "queue:default", job) }
end

# Runs +jobs+ then a MarkJob; returns when the mark is back.
def run_jobs(redis, klass, args, count)
  token = SecureRandom.hex(4)
  count.times { push(redis, klass, *args) }
  push(redis, "MarkJob", token)
  Timeout.timeout(600) { sleep 0.2 until redis.call("LRANGE", "bench:marks", "0", "-1").include?(token) }
end

CHAIN_PROGRAM = <<~'RUBY'
  require "sidekiq"
  require "gvlscope/sidekiq"
  setup, calls = ARGV[0], Integer(ARGV[1])
  config = Sidekiq::Config.new
  config.logger = Logger.new(nil)
  # trivial: a middleware that only yields, what any middleware costs Sidekiq's chain
  trivial = Class.new { def call(*) = yield }
  config.server_middleware { |chain| chain.add GVLScope::Sidekiq, stats_every: nil } if setup == "middleware"
  config.server_middleware { |chain| chain.add trivial } if setup == "trivial"
  GVLScope::Sidekiq.startup(config)
  chain = config.server_middleware
  # As Sidekiq 8 fetches it: enqueued_at in ms since the epoch (the middleware reads it).
  job = { "class" => "NoopJob", "args" => [], "jid" => "0123456789abcdef01234567", "queue" => "default",
          "enqueued_at" => Process.clock_gettime(Process::CLOCK_REALTIME, :millisecond) }
  instance = Object.new
  1000.times { chain.invoke(instance, job, "default") { nil } }
  GC.start
  calls.times { chain.invoke(instance, job, "default") { nil } }
RUBY

def chain_instructions(setup, calls)
  Callgrind.instructions(RbConfig.ruby, "-I", File.join(ROOT, "lib"), "-rbundler/setup", "-e", CHAIN_PROGRAM, setup, calls.to_s)
end

if PART != "sidekiq"
  per_call = %w[plain trivial middleware].to_h do |setup|
    [setup, (chain_instructions(setup, CALLS) - chain_instructions(setup, 0)).fdiv(CALLS)]
  end
  puts "ruby #{RUBY_VERSION}, sidekiq #{Gem.loaded_specs['sidekiq']&.version}: Sidekiq's server middleware chain, " \
       "#{CALLS} invocations in-process under callgrind, instructions per job"
  puts format("empty chain %.0f; a middleware that only yields %.0f (%+.0f); GVLScope::Sidekiq %.0f (%+.0f; %+.0f over " \
              "the yielding one)", per_call["plain"], per_call["trivial"], per_call["trivial"] - per_call["plain"],
              per_call["middleware"], per_call["middleware"] - per_call["plain"], per_call["middleware"] - per_call["trivial"])
  exit if PART == "chain"
end

redis = RedisServer.new
results = Hash.new { |h, k| h[k] = [] }
Dir.mktmpdir("gvlscope-sidekiq-instructions") do |dir|
  log = File.join(dir, "sidekiq.log")
  env = { "REDIS_URL" => redis.url }
  sidekiq = Callgrind.session(env, RbConfig.ruby, "-I", File.join(ROOT, "lib"), "-rbundler/setup", "-e",
                              'load Gem.bin_path("sidekiq", "sidekiq")', "--", "-r", File.join(ROOT, "bench/sidekiq_app.rb"),
                              "-c", "1", "-q", "default", dir: dir, log: log)
  begin
    redis.call("SADD", "queues", "default")
    run_jobs(redis, "NoopJob", [], 1) # booted and fetching
    (SETUPS.product(KINDS.keys) * ROUNDS).each do |setup, klass|
      run_jobs(redis, "SetupJob", [setup], 0)
      run_jobs(redis, klass, KINDS[klass], 200) # warm up
      # The MarkJob and its round trip are in the window too: counted, and small beside JOBS jobs.
      counted = sidekiq.window("#{setup}-#{klass}") { run_jobs(redis, klass, KINDS[klass], JOBS) }
      results[[setup, klass]] << counted.fdiv(JOBS)
      warn format("%-10s %-9s %10.0f instructions per job", setup, klass, results[[setup, klass]].last)
    end
  ensure
    sidekiq.stop
    redis.stop
  end
end

puts "ruby #{RUBY_VERSION}, sidekiq #{Gem.loaded_specs['sidekiq']&.version}, #{JOBS} jobs per window under callgrind " \
     "(concurrency 1), minimum of #{ROUNDS} rounds"
puts "| job | plain | with GVLScope::Sidekiq | added | share | rounds (plain; middleware) |"
puts "|---|---:|---:|---:|---:|---|"
KINDS.each_key do |klass|
  plain, measured = SETUPS.map { |setup| results[[setup, klass]].min }
  puts format("| %s | %.0f | %.0f | %+.0f | %.1f%% | %s; %s |", klass, plain, measured, measured - plain,
              100 * (measured - plain) / plain, results[["plain", klass]].map(&:round).join(", "),
              results[["middleware", klass]].map(&:round).join(", "))
end
