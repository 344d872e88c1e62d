# frozen_string_literal: true

# Ground truth for the GVL wait gvlscope reports per request and per job (issue 27): real servers
# driven by real clients over loopback, and for each quick request (or job) that a CPU-bound
# neighbour delayed, what the client measured beside what gvlscope said.
#
#   bundle exec ruby -Ilib bench/wait_truth.rb [--servers puma8-single-2,sidekiq8] [--tries 10] [--seed N]
#                                              [--connection fresh,keepalive]
#
# Servers (all by default):
#   puma{8,7}-{single,cluster}-{2,5}  Puma 8 (the bundle's) or 7 (gemfiles/puma7.gemfile), single
#                                     mode or cluster mode with 2 workers, 2 or 5 threads, serving
#                                     test/fixtures/web/app.ru (GVLScope::Rack outermost)
#   rails                             test/fixtures/rails/config.ru under Puma 8, single, 5 threads
#   falcon-1                          Falcon 0.57 (gemfiles/falcon.gemfile), one forked process with
#                                     one reactor thread: every request on a fiber of one event loop
#   falcon-threaded-2                 Falcon 0.57, --threaded: 2 threads in one process, a reactor
#                                     each (both serving test/fixtures/web/app.ru)
#   sidekiq{8,7}                      Sidekiq 8 (the bundle's) or 7 (gemfiles/sidekiq7.gemfile) on a
#                                     real redis-server, bench/wait_truth_jobs.rb
#   sidekiq{8,7}-burst                the same at concurrency 10, every processor busy (below)
#   async-jobs                        bench/wait_truth_async_jobs.rb: a job runner on `async`
#                                     (gemfiles/falcon.gemfile), 4 worker tasks on one event loop,
#                                     each popping its jobs from a real redis-server over its own
#                                     TCP connection (below)
#
# A web try: GET /cpu burns 300 ms of CPU in a pure Ruby loop (in cluster mode, one such request
# per worker); 20-100 ms later (random: users do not choose when their requests arrive) the same
# route burning 0 ms. With --connection fresh, each request on a new connection, timed by the
# client from before connecting to the whole response read (CLOCK_MONOTONIC); with keepalive, the
# quick request goes on a persistent connection (one Net::HTTP session, opened and warmed by a
# quick request before the neighbour starts, as a browser's or a pooled client's), timed from
# before writing the request to the whole response read. After each try, the quick request again
# (on a new connection, or on the same warm one) with nothing beside it: the same request alone. The route answers the pid that served it:
# in cluster mode a quick request that another worker served is shown as such, not measured. gvlscope's figure is the
# response's Server-Timing header (every entry is kept and printed, whatever entries there are).
# The reported wait is gvl-wait + loop-wait: under Falcon a quick request behind a CPU-bound fiber
# waits for its thread's event loop (issue 38), not for the GVL; a response without loop-wait
# there is said so in the server's line.
#
# A Sidekiq round: 3 BurnJobs of 400 ms each, then 15 QuickJobs pushed at random offsets 20-100 ms
# after them, and the same 15 QuickJobs alone in a round of their own. Concurrency 20: every job
# finds a processor waiting on Redis, so its time from the push (CLOCK_REALTIME, taken just before
# LPUSH) to its end (CLOCK_REALTIME at the end of perform) is its own. gvlscope's figure is
# GVLScope::Sidekiq's log line for the job (log_wait_over_ms: 0); Sidekiq's own `elapsed=` is shown
# beside it.
#
# An async-jobs try (issue 38): a BurnJob of 300 ms of CPU (on one worker's fiber, never giving the
# loop back), then 20-100 ms later a QuickJob, which a worker parked in BRPOP receives while the
# burn holds the loop; then the same QuickJob alone. A job's latency is from its push
# (CLOCK_REALTIME before LPUSH) to its end (CLOCK_REALTIME, the job's last act); gvlscope's figure
# is the runner's line for the job (RequestTiming#server_timing, as a Falcon request's: the job's
# loop-wait runs from its bytes' arrival on its worker's Redis connection to its task's turn).
#
# A burst round (issue 36): concurrency 10 and 10 BurnJobs that hold every processor (each burns
# its 400 ms of CPU once all 10 have started), then 10 QuickJobs pushed at the random offsets after
# the last one started: they sit in Redis until a processor is free. Besides the GVL wait, a job's
# line gives its queue latency (enqueued_at to the start, of which the GVL wait before the start is
# part); "coverage" is what gvlscope names of the delay: (queue latency + the GVL wait in the job) /
# (client latency - the median latency alone), shown for every Sidekiq run.
#
# Target (issue 36): reported wait >= 80 % of (client latency - the median latency alone) in at
# least 9 of 10 tries, fresh and keep-alive; no request breaks the invariants (broken_invariants:
# the summary's "broken"). bench/wait_truth_load.rb measures the same under continuous traffic.
require "json"
require "net/http"
require "optparse"
require "securerandom"
require "tmpdir"
require "fileutils"
require "rbconfig"
require "timeout"
require "etc"
require_relative "../lib/gvlscope/support/units"
require_relative "../test/support/redis_server"
require_relative "../test/support/falcon_process"
require_relative "../test/support/process_group"

module WaitTruth
  ROOT = File.expand_path("..", __dir__)
  GEMFILES = { "puma8" => "Gemfile", "puma7" => "gemfiles/puma7.gemfile",
               "sidekiq8" => "Gemfile", "sidekiq7" => "gemfiles/sidekiq7.gemfile" }.freeze
  WEB_APP = File.join(ROOT, "test/fixtures/web/app.ru")
  RAILS_APP = File.join(ROOT, "test/fixtures/rails/config.ru")
  JOBS_APP = File.join(ROOT, "bench/wait_truth_jobs.rb")
  ASYNC_JOBS_RUNNER = File.join(ROOT, "bench/wait_truth_async_jobs.rb")
  PUMA_SERVERS = %w[8 7].product(%w[single cluster], %w[2 5]).map { |version, mode, threads| "puma#{version}-#{mode}-#{threads}" }
  FALCON_SERVERS = { "falcon-1" => [:forked, 1], "falcon-threaded-2" => [:threaded, 2] }.freeze
  SERVERS = [*PUMA_SERVERS, "rails", *FALCON_SERVERS.keys, "sidekiq8", "sidekiq7", "sidekiq8-burst", "sidekiq7-burst",
             "async-jobs"].freeze
  BURN_MS = 300
  JOB_BURN_MS = 400
  BURN_JOBS = 3
  QUICK_JOBS = 15
  BURST = 10 # a burst round's concurrency, BurnJobs and QuickJobs
  OFFSET_SECONDS = (0.020..0.100) # when the quick request is sent after its neighbour
  TARGET = 0.8
  BOOT_TIMEOUT = 60
  # The Server-Timing entries whose sum is the reported wait (--wait-entries): the GVL's, and the
  # event loop's for a request on a fiber (Falcon; no such entry under Puma).
  WAIT_ENTRIES = %w[gvl-wait loop-wait].freeze
  # A try whose client latency exceeds the alone median by less than this was not delayed, and its
  # ratio is not computed: on a loaded 2-core machine the same request alone varies by that much.
  DELAYED_MS = 20.0
  # How the quick request reaches the server: a new connection, or a persistent one already used.
  CONNECTIONS = %w[fresh keepalive].freeze

  # One quick request or job. latency_ms: what the client measured (a job: push to end); wait_ms:
  # gvlscope's reported wait for it (the WAIT_ENTRIES it gave, summed); parts: every figure gvlscope gave ("gvl-wait" => ms, ...);
  # offset_ms: when it was sent after its neighbour; extra: the pid that served it, Sidekiq's elapsed.
  Sample = Struct.new(:latency_ms, :wait_ms, :parts, :offset_ms, :extra, keyword_init: true)

  # One server's run: the quick requests beside the neighbour and alone.
  class Result
    attr_reader :server, :beside, :alone, :notes

    def initialize(server, beside, alone, notes = [])
      @server = server
      @beside = beside
      @alone = alone
      @notes = notes
    end

    def alone_latency_ms = GVLScope::Units.median(@alone.map(&:latency_ms))
    def delay_ms(sample) = sample.latency_ms - alone_latency_ms
    # In cluster mode a quick request served by the other worker had no neighbour in its process:
    # whatever delayed it was not the GVL.
    def delayed?(sample) = sample.extra[:same_process] != false && delay_ms(sample) >= DELAYED_MS

    # reported wait / (client latency - latency alone); nil for a try that was not delayed.
    def ratio(sample) = delayed?(sample) ? sample.wait_ms / delay_ms(sample) : nil

    # The target: the reported wait covers 80 % of the delay (a try not delayed needs nothing).
    def met?(sample) = !delayed?(sample) || sample.wait_ms >= TARGET * delay_ms(sample)

    # A job's delay as gvlscope names it: its queue latency (the GVL wait before the start is part of
    # it) and the GVL wait in the job, over the delay; nil without a queue latency or a delay.
    def coverage(sample)
      latency = sample.parts["queue latency"]
      return nil unless latency && delayed?(sample)

      (latency + sample.wait_ms - sample.parts.fetch("pickup", 0.0)) / delay_ms(sample)
    end

    def part_names = (@beside + @alone).flat_map { |sample| sample.parts.keys }.uniq
  end

  module_function

  def clock = Process.clock_gettime(Process::CLOCK_MONOTONIC)

  # gvlscope's clock is the TSC calibrated against CLOCK_MONOTONIC over 2 ms at load
  # (ext/gvlscope/clock.c): its rate may be off by a few tenths of a percent.
  def within_clock_error(ms) = ms * 1.01 + 0.5

  # The request's time in the app from its Server-Timing parts: gvl-wait holds the wait before
  # the app too (queue-gvl, shown with queue), the rest is the app's run, idle and GC
  # (ext/gvlscope/request_timing.c, timing_server_timing).
  def app_ms(parts) = parts.fetch("gvl-wait", 0.0) - parts.fetch("queue-gvl", 0.0) +
                      parts.values_at("gvl-run", "idle", "gc").compact.sum

  # The physical bounds every response's parts keep (issue 36): its GVL wait lies within its time
  # at the server (queue + app), which lies within what its client measured. The names of those
  # it breaks.
  # queue starts at the request's arrival, which the kernel's TCP clock tells to a jiffy either
  # way (ext/gvlscope/handoff.c: 4 ms on Debian's kernels), and a thread's wake within a jiffy of
  # it is taken for the arrival: another connection's wake may be two jiffies early. That is the
  # error of the arrival's clock.
  # loop-wait (a request on a fiber: Falcon) starts at that arrival too, before the app: queue,
  # when given (from 1 ms), holds it (queue-loop); its GVL wait is in gvl-wait, not in loop-wait.
  KERNEL_JIFFY_MS = 4.0
  ARRIVAL_ERROR_MS = 2 * KERNEL_JIFFY_MS

  def broken_invariants(parts, latency_ms)
    at_server_ms = [parts.fetch("queue", 0.0), parts.fetch("loop-wait", 0.0)].max + app_ms(parts)
    arrival_error_ms = if parts.key?("queue") then ARRIVAL_ERROR_MS
                       elsif parts.key?("loop-wait") then KERNEL_JIFFY_MS
                       else 0.0
                       end
    broken = []
    broken << "gvl-wait <= queue + app" if parts.fetch("gvl-wait", 0.0) > within_clock_error(at_server_ms)
    broken << "queue + app <= client" if at_server_ms > within_clock_error(latency_ms) + arrival_error_ms
    broken
  end

  # The GVL wait and the named parts of queue that are not the GVL's (queue-gvl is inside gvl-wait).
  def named_wait_ms(parts) = parts.fetch("gvl-wait", 0.0) + parts.fetch("queue-threads", 0.0) + parts.fetch("queue-cpu", 0.0)

  # "gvl-wait;dur=12.3, gvl-run;dur=0.1;desc=..." => { "gvl-wait" => 12.3, "gvl-run" => 0.1 }
  def server_timing(header)
    header.to_s.split(",").each_with_object({}) do |entry, parts|
      name = entry.strip[/\A[^;\s]+/] or next
      duration = entry[/;\s*dur=([\d.]+)/, 1]
      parts[name] = Float(duration) if duration
    end
  end

  # Runs one server (a name of SERVERS) for +tries+ tries; returns its Result.
  def run(server, tries:, seed:, dir:, quick_jobs: QUICK_JOBS, wait_entries: WAIT_ENTRIES, connection: "fresh")
    rng = Random.new(seed)
    case server
    when /\Apuma([78])-(single|cluster)-(\d+)\z/
      workers = Regexp.last_match(2) == "cluster" ? 2 : 0
      web = WebServer.new(gemfile: GEMFILES.fetch("puma#{Regexp.last_match(1)}"), rackup: WEB_APP,
                          threads: Integer(Regexp.last_match(3)), workers: workers, dir: dir,
                          wait_entries: wait_entries)
      web.measure(server, tries, rng, path: "/cpu?cpu_ms=", connection: connection)
    when "rails"
      web = WebServer.new(gemfile: GEMFILES.fetch("puma8"), rackup: RAILS_APP, threads: 5, workers: 0, dir: dir,
                          wait_entries: wait_entries, env: { "RAILS_ENV" => "production" })
      web.measure(server, tries, rng, path: "/cpu?ms=", connection: connection)
    when *FALCON_SERVERS.keys
      model, count = FALCON_SERVERS.fetch(server)
      web = FalconServer.new(model: model, count: count, dir: dir, wait_entries: wait_entries)
      web.measure(server, tries, rng, path: "/cpu?cpu_ms=", connection: connection)
    when /\A(sidekiq[78])\z/
      rounds = (tries / quick_jobs.to_f).ceil
      JobServer.new(gemfile: GEMFILES.fetch(server), dir: dir).measure(server, rounds, quick_jobs, rng)
    when /\A(sidekiq[78])-burst\z/
      rounds = (tries / BURST.to_f).ceil
      JobServer.new(gemfile: GEMFILES.fetch(Regexp.last_match(1)), dir: dir, burst: true).measure(server, rounds, BURST, rng)
    when "async-jobs"
      AsyncJobServer.new(dir: dir, wait_entries: wait_entries).measure(server, tries, rng)
    else
      raise ArgumentError, "unknown server #{server.inspect}; servers: #{SERVERS.join(', ')}"
    end
  end

  # A child process in its own process group, its output in a log file; stopped with TERM, then
  # KILL if it does not finish, so a stuck server cannot hang the harness.
  class Child
    attr_reader :pid, :log_path

    def initialize(env, argv, log_path)
      @log_path = log_path
      @pid = Process.spawn({ "RUBYOPT" => nil }.merge(env), *argv, out: log_path, err: [:child, :out], pgroup: true)
    end

    def log = File.read(@log_path)
    def tail = log.lines.last(30).join

    def wait_for(what, seconds = BOOT_TIMEOUT)
      deadline = WaitTruth.clock + seconds
      until (found = yield(log))
        raise "#{what}: not there in #{seconds} s; the log's end:\n#{tail}" if WaitTruth.clock > deadline
        raise "#{what}: the process exited; the log's end:\n#{tail}" if Process.waitpid(@pid, Process::WNOHANG)

        sleep 0.05
      end
      found
    end

    def stop = ProcessGroup.stop(@pid)
  end

  # `puma -C config` on a free loopback port, under the gemfile's Puma and this checkout's lib.
  class WebServer
    def initialize(gemfile:, rackup:, threads:, workers:, dir:, wait_entries:, env: {})
      @wait_entries = wait_entries
      @gemfile = File.join(ROOT, gemfile)
      @rackup = rackup
      @threads = threads
      @workers = workers
      @dir = dir
      @env = env
    end

    # path: the app's CPU route, which answers the pid of the process that served it, less its
    # burn's length in ms: the neighbour burns BURN_MS, the quick request 0 (in cluster mode the
    # pids tell whether both were served by the same worker). connection: one of CONNECTIONS.
    def measure(name, tries, rng, path:, connection: "fresh")
      start(path)
      warm_up(path)
      beside = []
      alone = []
      tries.times do
        session = connection == "keepalive" ? warm_session : nil
        beside << beside_neighbour(rng.rand(OFFSET_SECONDS), session)
        sleep 0.05 # the neighbour's thread is back waiting for work
        alone << timed_get(@quick_path, session)
      ensure
        session&.finish
      end
      Result.new("#{name} #{connection}", beside, alone, [description, connection == "keepalive" ? "keep-alive" : "new connections"])
    ensure
      stop
    end

    attr_reader :port, :quick_path, :burn_path

    def description = "#{version}, #{@workers.zero? ? 'single' : "cluster (#{@workers} workers)"}, #{@threads} threads"
    def stop = @child&.stop
    def log = @child.log

    # Boots the server; path: the app's CPU route (the burn's length in ms follows it).
    def start(path)
      @burn_path = "#{path}#{BURN_MS}"
      @quick_path = "#{path}0"
      config = File.join(@dir, "puma.rb")
      File.write(config, <<~RUBY)
        bind "tcp://127.0.0.1:0"
        threads #{@threads}, #{@threads}
        workers #{@workers}
        rackup #{@rackup.inspect}
        environment "production"
      RUBY
      @child = Child.new(@env.merge("BUNDLE_GEMFILE" => @gemfile),
                         [RbConfig.ruby, "-I", File.join(ROOT, "lib"), "-rbundler/setup", "-e",
                          'load Gem.bin_path("puma", "puma")', "--", "-C", config],
                         File.join(@dir, "puma.log"))
      @port = Integer(@child.wait_for("puma listening") { |log| log[%r{Listening on http://127\.0\.0\.1:(\d+)}, 1] })
      @child.wait_for("#{@workers} workers booted") { |log| log.scan(/Worker \d+ \(PID: \d+\) booted/).size >= @workers }
    end

    def version = @child.log[/Puma version: ([\d.]+)/, 1]&.then { |v| "Puma #{v}" } || "Puma"

    # Every pool thread (of every worker) has served a request and the code is loaded.
    def warm_up(path)
      2.times do
        Array.new(@threads * [@workers, 1].max) { Thread.new { timed_get("#{path}20") } }.each(&:join)
      end
      5.times { timed_get(@quick_path) }
    end

    def beside_neighbour(offset, session)
      started = WaitTruth.clock
      # One neighbour per worker: in cluster mode, a quick request finding a worker free is served
      # there, with no neighbour at all.
      neighbours = Array.new([@workers, 1].max) { Thread.new { timed_get(@burn_path) } }
      sleep offset
      quick = timed_get(@quick_path, session)
      busy = neighbours.map { |neighbour| neighbour.value.extra.fetch(:pid) }
      quick.extra[:same_process] = busy.include?(quick.extra.fetch(:pid)) unless @workers.zero?
      quick.offset_ms = (quick.extra.delete(:sent) - started) * 1000
      quick
    end
    private :version, :beside_neighbour

    # A persistent connection that has served one quick request: the next goes on a reused connection.
    def warm_session
      session = Net::HTTP.start("127.0.0.1", @port, open_timeout: 10, read_timeout: 30)
      session.get(@quick_path)
      session
    end

    # One request, on a new connection (session nil) or on the session's; the client's latency from
    # before connecting (or writing, on a session) to the whole response read.
    def timed_get(path, session = nil)
      sent = WaitTruth.clock
      response = session ? session.get(path) : Net::HTTP.start("127.0.0.1", @port, open_timeout: 10, read_timeout: 30) { |http| http.get(path) }
      latency_ms = (WaitTruth.clock - sent) * 1000
      raise "GET #{path}: #{response.code}\n#{@child.log}" unless response.code == "200"

      parts = WaitTruth.server_timing(response["server-timing"])
      waits = parts.values_at(*@wait_entries).compact
      Sample.new(latency_ms: latency_ms, wait_ms: waits.empty? ? Float::NAN : waits.sum, parts: parts,
                 extra: { sent: sent, pid: response.body.to_s.strip })
    end
  end

  # `falcon serve` (test/support/falcon_process.rb) serving WEB_APP, measured as WebServer measures
  # Puma. model: :forked (count processes, one reactor thread each) or :threaded (count threads).
  class FalconServer < WebServer
    def initialize(model:, count:, dir:, wait_entries:)
      super(gemfile: FalconProcess::GEMFILE, rackup: WEB_APP, threads: count, workers: 0, dir: dir, wait_entries: wait_entries)
      @model = model
    end

    # A gvlscope that does not measure the wait for the event loop gives no loop-wait: said in the
    # server's line, not left to a column of dashes.
    def measure(...)
      result = super
      unless (result.beside + result.alone).any? { |sample| sample.parts.key?("loop-wait") }
        result.notes << "no loop-wait in any response (this gvlscope does not measure the wait for the event loop): " \
                        "the reported wait is gvl-wait alone"
      end
      result
    end

    def start(path)
      @burn_path = "#{path}#{BURN_MS}"
      @quick_path = "#{path}0"
      @child = FalconProcess.new(rackup: @rackup, dir: @dir, model: @model, count: @threads)
      @port = @child.start.port
    end

    def description = @child.description
  end

  # The Sidekiq CLI on bench/wait_truth_jobs.rb, with its own redis-server.
  class JobServer
    CONCURRENCY = 20 # > BURN_JOBS + QUICK_JOBS: a pushed job never waits for a free processor
    # GVLScope::Sidekiq's line: its time, the jid, the wait, then the rest's "name N ms" pairs.
    # Sidekiq 7 starts a line with the time, Sidekiq 8 with the (coloured) level.
    TIME = /(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z)/
    GVLSCOPE_LINE = /#{TIME}.*gvlscope: QuickJob \(queue default, jid (\h+)\) waited ([\d.]+) ms for the GVL(.*)$/
    DONE_LINE = /jid=(\h+)\b.*elapsed=([\d.]+).*\bdone$/
    COLOURS = /\e\[[\d;]*m/

    def initialize(gemfile:, dir:, burst: false)
      @gemfile = File.join(ROOT, gemfile)
      @dir = dir
      @ends_path = File.join(dir, "ends.json")
      @burst = burst
      @concurrency = burst ? BURST : CONCURRENCY
      @version = gemfile.include?("sidekiq7") ? 7 : 8
    end

    def measure(name, rounds, quick_jobs, rng)
      raise "redis-server is not installed (script/test installs it)" unless RedisServer.available?

      @redis = RedisServer.new
      start
      pushed = { alone: {}, beside: {} }
      push_round(2, quick_jobs, rng, {}) # warm-up: the classes' first runs, every processor's connection
      rounds.times do
        push_round(0, quick_jobs, rng, pushed[:alone])
        push_round(@burst ? BURST : BURN_JOBS, quick_jobs, rng, pushed[:beside])
      end
      @child.stop
      ends = JSON.parse(File.read(@ends_path))
      log = @child.log.gsub(COLOURS, "")
      version = log[/Sidekiq (\d+\.\d+\.\d+)/, 1]
      Result.new(name, samples(pushed[:beside], ends, log), samples(pushed[:alone], ends, log),
                 ["Sidekiq #{version}, concurrency #{@concurrency}#{', a burst' if @burst}, Redis on loopback"])
    ensure
      @child&.stop
      @redis&.stop
    end

    private

    def start
      @child = Child.new({ "BUNDLE_GEMFILE" => @gemfile, "REDIS_URL" => @redis.url, "WAIT_TRUTH_ENDS" => @ends_path },
                         [RbConfig.ruby, "-I", File.join(ROOT, "lib"), "-rbundler/setup", "-e",
                          'load Gem.bin_path("sidekiq", "sidekiq")', "--", "-r", JOBS_APP, "-c", @concurrency.to_s,
                          "-q", "default", "-t", "5"],
                         File.join(@dir, "sidekiq.log"))
      @child.wait_for("sidekiq connected") { |log| log[/connecting to Redis/] }
      sleep 1 # its processors start fetching after the Redis connection
    end

    # +burns+ BurnJobs, then quick_jobs QuickJobs at random offsets after them; waits until all
    # are done. pushed: jid => [offset s, push CLOCK_REALTIME].
    def push_round(burns, quick_jobs, rng, pushed)
      # A burst's BurnJobs wait for one another before burning: every processor busy at once.
      @burns_pushed = (@burns_pushed || 0) + burns
      burn_jids = Array.new(burns) { push("BurnJob", JOB_BURN_MS, @burst ? @burns_pushed : 0) }
      if @burst && burns.positive?
        @child.wait_for("#{burns} BurnJobs started", 60) do |log|
          text = log.gsub(COLOURS, "")
          burn_jids.all? { |jid| text.match?(/jid=#{jid}\b.*\bstart$/) }
        end
      end
      base = WaitTruth.clock
      jids = Array.new(quick_jobs) { rng.rand(OFFSET_SECONDS) }.sort.map do |offset|
        sleep [base + offset - WaitTruth.clock, 0].max
        realtime = Process.clock_gettime(Process::CLOCK_REALTIME)
        offset = WaitTruth.clock - base
        push("QuickJob").tap { |jid| pushed[jid] = [offset, realtime] }
      end
      all = burn_jids + jids
      @child.wait_for("#{all.size} jobs done", 60) { |log| (all - log.gsub(COLOURS, "").scan(DONE_LINE).map(&:first)).empty? }
    end

    # As Sidekiq::Client pushes a job (enqueued_at as this Sidekiq's client stamps it: 8, Integer
    # ms since the epoch; 7, Float seconds); returns its jid.
    def push(klass, *args)
      jid = SecureRandom.hex(12)
      now = Process.clock_gettime(Process::CLOCK_REALTIME)
      now_ms = (now * 1000).floor
      @redis.call("LPUSH", "queue:default", JSON.generate("class" => klass, "args" => args, "queue" => "default",
                                                          "jid" => jid, "retry" => false, "created_at" => now_ms,
                                                          "enqueued_at" => @version == 7 ? now : now_ms))
      jid
    end

    def samples(pushed, ends, log)
      reported = log.scan(GVLSCOPE_LINE).to_h { |time, jid, wait, rest| [jid, [time, Float(wait), rest]] }
      elapsed = log.scan(DONE_LINE).to_h { |jid, seconds| [jid, Float(seconds) * 1000] }
      pushed.map do |jid, (offset, pushed_at)|
        logged_at, wait_ms, rest = reported.fetch(jid) { raise "no gvlscope line for QuickJob #{jid}:\n#{log}" }
        # "(P ms of it before the job started); in the job D ms: run R ms, idle I ms, gc G ms"
        parts = { "wait" => wait_ms }
        parts["pickup"] = Float(rest[/\(([\d.]+) ms of it before/, 1]) if rest.include?("of it before")
        parts["duration"] = Float(rest[/in the job ([\d.]+) ms/, 1]) if rest.include?("in the job")
        # "which it reached Q ms before; B ms of the wait blocked on the way": from the fetch that brought it (Handoffs)
        parts["queue"] = Float(rest[/reached ([\d.]+) ms before/, 1]) if rest.include?("reached")
        parts["blocked"] = Float(rest[/([\d.]+) ms of the wait blocked on the way/, 1]) if rest.include?("blocked on the way")
        # "; queue latency L ms (enqueued_at to the start)"
        parts["queue latency"] = Float(rest[/queue latency ([\d.]+) ms/, 1]) if rest.include?("queue latency")
        rest.scan(/[,:] ([a-z][\w-]*) ([\d.]+) ms/) { |part, ms| parts[part] ||= Float(ms) }
        Sample.new(latency_ms: (ends.fetch(jid) - pushed_at) * 1000, wait_ms: wait_ms, parts: parts,
                   offset_ms: offset * 1000,
                   extra: { elapsed_ms: elapsed[jid], pushed_at: pushed_at, logged_at: logged_at })
      end
    end
  end

  # bench/wait_truth_async_jobs.rb, a job runner on `async`, with its own redis-server.
  class AsyncJobServer
    WORKERS = 4 # a QuickJob pushed beside a BurnJob finds a worker parked in BRPOP
    JOB_TIMEOUT = 60

    def initialize(dir:, wait_entries: WAIT_ENTRIES)
      @dir = dir
      @wait_entries = wait_entries
    end

    attr_reader :child

    # The runner and its Redis, started; stopped by #stop.
    def start
      raise "redis-server is not installed (script/test installs it)" unless RedisServer.available?

      @redis = RedisServer.new
      @child = Child.new({ "BUNDLE_GEMFILE" => FalconProcess::GEMFILE, "REDIS_PORT" => @redis.port.to_s,
                           "WORKERS" => WORKERS.to_s },
                         [RbConfig.ruby, "-rbundler/setup", ASYNC_JOBS_RUNNER], File.join(@dir, "async-jobs.log"))
      @child.wait_for("the async job runner started") { |log| log[/^async-jobs: .*/] }
      3.times { run_alone } # warm-up: the classes' first runs, every worker's first BRPOP
      self
    end

    def stop
      @child&.stop
      @redis&.stop
    end

    def description = @child.log[/^async-jobs: (.*)/, 1]

    def measure(name, tries, rng)
      start
      beside = []
      alone = []
      tries.times do
        beside << run_beside_burn(rng.rand(OFFSET_SECONDS))
        sleep 0.05 # the burning worker is back in BRPOP
        alone << run_alone
      end
      Result.new(name, beside, alone, [description, "Redis on loopback"])
    ensure
      stop
    end

    # A QuickJob pushed offset s after a BurnJob of BURN_MS, once both are done.
    def run_beside_burn(offset)
      burn = push("BurnJob", BURN_MS)
      sleep offset
      quick = push("QuickJob")
      samples = wait_for(burn, quick)
      samples.last.offset_ms = (quick[:pushed_at] - burn[:pushed_at]) * 1000
      samples.last
    end

    def run_alone = wait_for(push("QuickJob")).last

    private

    # As the runner reads a job (enqueued_at in ms since the epoch); its jid and push time.
    def push(klass, *args)
      jid = SecureRandom.hex(12)
      pushed_at = Process.clock_gettime(Process::CLOCK_REALTIME)
      @redis.call("LPUSH", "queue:async", JSON.generate("class" => klass, "args" => args, "jid" => jid,
                                                        "enqueued_at" => (pushed_at * 1000).floor))
      { jid: jid, pushed_at: pushed_at }
    end

    # The jobs' Samples once the runner logged them all.
    def wait_for(*pushed)
      lines = @child.wait_for("#{pushed.size} jobs done", JOB_TIMEOUT) do |log|
        found = log.lines.filter_map { |line| JSON.parse(line) if line.start_with?("{") }.to_h { |line| [line["jid"], line] }
        pushed.map { |job| found[job[:jid]] }.then { |all| all.all? && all }
      end
      pushed.zip(lines).map do |job, line|
        parts = WaitTruth.server_timing(line.fetch("server_timing"))
        waits = parts.values_at(*@wait_entries).compact
        Sample.new(latency_ms: (line.fetch("ended_at") - job[:pushed_at]) * 1000,
                   wait_ms: waits.empty? ? Float::NAN : waits.sum, parts: parts,
                   extra: { jid: job[:jid], queue_latency_ms: line["queue_latency_ms"] })
      end
    end
  end

  # The tables: each try, then a summary line per server.
  module Table
    module_function

    def ms(value) = value.nil? || (value.is_a?(Float) && value.nan?) ? "-" : format("%.1f", value)

    def tries(result, out)
      names = result.part_names
      out.puts "== #{result.server}: #{result.notes.join('; ')}"
      header = ["try", "offset ms", "client ms", "alone ms", "ratio", "met", *names.map { |n| "#{n} ms" }]
      header << "coverage" if names.include?("queue latency")
      header << "elapsed ms" if result.beside.first&.extra&.key?(:elapsed_ms)
      rows = result.beside.each_with_index.map do |sample, i|
        ratio = result.ratio(sample)
        row = [(i + 1).to_s, ms(sample.offset_ms), ms(sample.latency_ms), ms(result.alone[i % result.alone.size].latency_ms),
               ratio_text(result, sample), result.met?(sample) ? "yes" : "no",
               *names.map { |n| ms(sample.parts[n]) }]
        row << ratio_text(result, sample, result.coverage(sample)) if header.include?("coverage")
        row << ms(sample.extra[:elapsed_ms]) if header.last == "elapsed ms"
        row
      end
      print_rows(header, rows, out)
    end

    def ratio_text(result, sample, ratio = result.ratio(sample))
      return "other worker" if sample.extra[:same_process] == false
      return "not delayed" unless result.delayed?(sample)

      format("%.2f", ratio)
    end

    SUMMARY = ["server", "tries", "other worker", "delayed", "client ms", "alone ms", "wait ms", "ratio", ">= 80 %",
               "alone wait ms (max)", "broken", "queue latency ms", "coverage", "covered >= 80 %"].freeze

    def summary_row(result)
      delayed = result.beside.select { |sample| result.delayed?(sample) }
      ratios = delayed.map { |sample| result.ratio(sample) }
      alone_waits = result.alone.map(&:wait_ms)
      other = result.beside.count { |sample| sample.extra[:same_process] == false }
      [result.server, result.beside.size.to_s, other.to_s, delayed.size.to_s,
       ms(GVLScope::Units.median(result.beside.map(&:latency_ms))), ms(result.alone_latency_ms),
       ms(GVLScope::Units.median(result.beside.map(&:wait_ms))), ratios.empty? ? "-" : format("%.2f", GVLScope::Units.median(ratios)),
       "#{result.beside.count { |sample| result.met?(sample) }}/#{result.beside.size}",
       "#{ms(GVLScope::Units.median(alone_waits))} (#{ms(alone_waits.max)})", broken_text(result),
       *coverage_cells(result, delayed)]
    end

    # Requests (beside and alone) whose parts break an invariant (WaitTruth.broken_invariants); a
    # job's latency ends inside its timing, so jobs are not checked here.
    def broken_text(result)
      return "-" if result.beside.first&.extra&.key?(:elapsed_ms)

      samples = result.beside + result.alone
      "#{samples.count { |sample| !WaitTruth.broken_invariants(sample.parts, sample.latency_ms).empty? }}/#{samples.size}"
    end

    # Jobs only: the median queue latency, the median coverage of the delayed ones, and how many
    # of those it brought to 80 %.
    def coverage_cells(result, delayed)
      coverages = delayed.filter_map { |sample| result.coverage(sample) }
      return %w[- - -] if coverages.empty?

      [ms(GVLScope::Units.median(result.beside.filter_map { |sample| sample.parts["queue latency"] })),
       format("%.2f", GVLScope::Units.median(coverages)), "#{coverages.count { |c| c >= TARGET }}/#{delayed.size}"]
    end

    def print_rows(header, rows, out)
      widths = header.each_index.map { |i| [header[i], *rows.map { |row| row[i] }].map(&:size).max }
      [header, *rows].each { |row| out.puts row.each_with_index.map { |cell, i| cell.rjust(widths[i]) }.join("  ").rstrip }
    end
  end

  def main(argv, out = $stdout)
    servers = SERVERS
    tries = 10
    seed = Random.new_seed % 100_000
    wait_entries = WAIT_ENTRIES
    connections = CONNECTIONS
    parser = OptionParser.new do |opts|
      opts.banner = "Usage: bundle exec ruby -Ilib bench/wait_truth.rb [--servers a,b] [--tries N] [--seed N] [--connection fresh,keepalive]"
      opts.on("--servers LIST", Array, "servers to run (default all): #{SERVERS.join(', ')}") { |list| servers = list }
      opts.on("--tries N", Integer, "quick requests beside the neighbour per server (default 10; Sidekiq: " \
                                    "rounds of #{QUICK_JOBS} jobs)") { |n| tries = n }
      opts.on("--seed N", Integer, "the offsets' random seed (default random, printed)") { |n| seed = n }
      opts.on("--wait-entries LIST", Array, "Server-Timing entries summed as the reported wait " \
                                            "(default #{WAIT_ENTRIES.join(',')})") { |list| wait_entries = list }
      opts.on("--connection LIST", Array, "web servers' quick requests on: #{CONNECTIONS.join(', ')} " \
                                          "(default both)") { |list| connections = list }
    end
    begin
      parser.parse!(argv)
    rescue OptionParser::ParseError => e
      abort "wait_truth: #{e.message}\n#{parser.banner}"
    end
    unknown = servers - SERVERS
    abort "wait_truth: unknown server #{unknown.join(', ')}; servers: #{SERVERS.join(', ')}" unless unknown.empty?
    abort "wait_truth: --tries must be at least 1" unless tries.positive?
    unknown = connections - CONNECTIONS
    abort "wait_truth: unknown connection #{unknown.join(', ')}; connections: #{CONNECTIONS.join(', ')}" unless unknown.empty?

    out.puts "wait_truth: Ruby #{RUBY_VERSION}, #{Etc.nprocessors} CPUs, seed #{seed}, #{Time.now.utc.strftime('%Y-%m-%d %H:%M UTC')}"
    runs = servers.flat_map { |server| server.match?(/\A(sidekiq|async-jobs)/) ? [[server, nil]] : connections.map { |c| [server, c] } }
    results = runs.map do |server, connection|
      Dir.mktmpdir("wait-truth") do |dir|
        started = clock
        result = run(server, tries: tries, seed: seed, dir: dir, wait_entries: wait_entries, connection: connection)
        Table.tries(result, out)
        out.puts format("(%.0f s)", clock - started)
        result
      end
    end
    out.puts "== summary (reported wait: #{wait_entries.join(' + ')}; ratio (coverage): reported wait / " \
             "(client latency - median latency alone), over the delayed tries)"
    Table.print_rows(Table::SUMMARY, results.map { |result| Table.summary_row(result) }, out)
  rescue RuntimeError => e # a server that did not boot or answer: its message carries its log's end
    abort "wait_truth: #{e.message}"
  end
end

WaitTruth.main(ARGV) if $PROGRAM_NAME == __FILE__
