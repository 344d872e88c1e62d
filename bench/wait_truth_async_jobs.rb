# frozen_string_literal: true

# The async job runner of bench/wait_truth.rb's `async-jobs` and test/integrations/async_jobs_test.rb
# (issue 38): a runner on the `async` gem (gemfiles/falcon.gemfile's bundle) with WORKERS worker
# tasks on one thread's event loop, each popping its jobs from Redis (BRPOP on queue:async, over a
# TCP connection of its own, read through the Fiber scheduler) and running them on its task, one at
# a time; GVLScope::EventLoops.measure_job measures each from its bytes' arrival on that connection.
#
#   REDIS_PORT=6379 BUNDLE_GEMFILE=gemfiles/falcon.gemfile ruby -rbundler/setup bench/wait_truth_async_jobs.rb
#
#   REDIS_PORT  the redis-server's loopback port
#   WORKERS     worker tasks (default 4): a job pushed beside a BurnJob finds one parked in BRPOP
#
# Jobs ({"class", "args", "jid", "enqueued_at"} as JSON, enqueued_at in ms since the epoch):
#   BurnJob(ms)  burns ms of its thread's CPU time in a pure Ruby loop, never giving the loop back:
#                the CPU-bound neighbour, on another fiber than the jobs it delays
#   QuickJob     nothing: its end (CLOCK_REALTIME, taken as the job's last act) is the ground truth's
#
# One JSON line per job on stdout, after it finished (the job's log line): its jid, class, end,
# RequestTiming#server_timing (the figures in Server-Timing's words, as a Falcon request's), to_h
# and its queue latency (enqueued_at to the start).
require "async"
require "json"
require "socket"
require "gvlscope"

$stdout.sync = true # the harness reads the lines while the runner runs

module AsyncJobs
  QUEUE = "queue:async"
  TAGS = { queue: "async" }.freeze

  # RESP over a TCP socket: enough for BRPOP. In a task, a read that would block goes to the Fiber
  # scheduler (io_wait), which runs the loop's other tasks meanwhile.
  class Redis
    attr_reader :socket

    def initialize(port) = @socket = TCPSocket.new("127.0.0.1", port)

    def call(*command)
      @socket.write("*#{command.size}\r\n" + command.map { |arg| "$#{arg.to_s.bytesize}\r\n#{arg}\r\n" }.join)
      reply
    end

    private

    def reply
      line = @socket.gets("\r\n") or raise IOError, "redis closed the connection"
      case line[0]
      when "+" then line[1..].chomp
      when "-" then raise line[1..].chomp
      when ":" then Integer(line[1..])
      when "$" then (size = Integer(line[1..])).negative? ? nil : @socket.read(size + 2).chomp("\r\n")
      when "*" then (size = Integer(line[1..])).negative? ? nil : Array.new(size) { reply }
      else raise IOError, "unexpected reply #{line.inspect}"
      end
    end
  end

  module_function

  def perform(job)
    case job.fetch("class")
    when "BurnJob"
      cpu_clock = -> { Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) }
      deadline = cpu_clock.call + job.fetch("args").first / 1000.0
      x = 0
      x += 1 while cpu_clock.call < deadline
    when "QuickJob" then nil
    else raise ArgumentError, "unknown job class #{job['class'].inspect}"
    end
    Process.clock_gettime(Process::CLOCK_REALTIME)
  end

  # A worker task: pops a job, runs it on this task, logs it; again.
  def work(port)
    redis = Redis.new(port)
    loop do
      _queue, payload = redis.call("BRPOP", QUEUE, "0")
      job = JSON.parse(payload)
      ended_at = nil
      timing = GVLScope::EventLoops.measure_job(redis.socket, job["class"], TAGS, enqueued_at: job["enqueued_at"]) do
        ended_at = perform(job)
      end
      puts JSON.generate("jid" => job["jid"], "class" => job["class"], "ended_at" => ended_at,
                         "server_timing" => timing.server_timing, "timing" => timing.to_h,
                         "queue_latency_ms" => timing.queue_latency_ms)
    end
  end
end

GVLScope::Metrics.enable
GVLScope::EventLoops.track # from the first job on: tracking that starts at a job leaves that job's turn unknown
port = Integer(ENV.fetch("REDIS_PORT"))
workers = Integer(ENV.fetch("WORKERS", "4"))
Async do |task|
  workers.times { task.async { AsyncJobs.work(port) } }
  puts "async-jobs: #{workers} workers on Redis port #{port}, async #{Async::VERSION}"
end
