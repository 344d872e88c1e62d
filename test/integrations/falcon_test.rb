# frozen_string_literal: true

require "test_helper"
require "net/http"
require "json"
require "tmpdir"
require_relative "../support/falcon_process"
require_relative "../../bench/wait_truth"

# A real Falcon (gemfiles/falcon.gemfile) serving test/fixtures/web/app.ru (GVLScope::Rack
# outermost) in one forked process with one reactor thread, and real Net::HTTP clients (issue 38).
# Every request runs on a fiber of that thread's event loop: a request that waits for a CPU-bound
# neighbour waits for the loop, not for the GVL (nobody else wants it), so Server-Timing's
# gvl-wait cannot show it; loop-wait must.
class FalconTest < Minitest::Test
  include GVLScopeTestHelper

  APP = File.join(GVLScopeTestHelper::ROOT, "test/fixtures/web/app.ru")
  # The app's CPU route: burns N ms of its thread's CPU time in a pure Ruby loop (never yielding to
  # the loop) and answers the pid of the worker that served it.
  QUICK = "/cpu?cpu_ms=0"
  BURN = "/cpu?cpu_ms=300"
  TRIES = 5
  # The start of loop-wait is the kernel's word for when the request's bytes came (TCP_INFO's
  # tcpi_last_data_recv), which counts jiffies: HZ 250 on this kind of machine (/proc/config.gz),
  # so that moment, and with it loop-wait, may be one jiffy (4 ms) off either way.
  KERNEL_JIFFY_MS = WaitTruth::KERNEL_JIFFY_MS

  Reply = Struct.new(:status, :body, :parts, :client_ms, :headers) do
    def loop_wait = parts["loop-wait"]
    def waited = parts.fetch("loop-wait", 0.0) + parts.fetch("gvl-wait", 0.0)
    def to_s = "#{status} #{client_ms.round(1)} ms #{parts.transform_values { |ms| ms.round(2) }}"
    alias_method :inspect, :to_s # in failure messages' lists
  end

  def setup
    @dir = Dir.mktmpdir("gvlscope-falcon")
    @servers = []
  end

  def teardown
    @servers.each(&:stop)
    FileUtils.rm_rf(@dir)
  end

  def start_falcon(env: {})
    server = FalconProcess.new(rackup: APP, dir: @dir, env: env)
    @servers << server # stopped in teardown even if it never got ready
    server.start
  end

  # A kept-alive connection: Net::HTTP would silently open a new one after 2 s idle (its default
  # keep_alive_timeout), which would make a "kept" request a fresh one.
  def kept_connection(server)
    http = Net::HTTP.new("127.0.0.1", server.port)
    http.open_timeout = 10
    http.read_timeout = 30
    http.keep_alive_timeout = 600
    http.start
  end

  # One GET on +session+ (kept alive) or, without one, on a new connection; the client's latency
  # from before connecting (or writing) to the whole response read.
  def timed_get(server, path, session = nil)
    sent = clock
    response = session ? session.get(path) : Net::HTTP.start("127.0.0.1", server.port, open_timeout: 10, read_timeout: 30) { |http| http.get(path) }
    Reply.new(response.code, response.body, WaitTruth.server_timing(response["server-timing"]), (clock - sent) * 1000,
              response.to_hash)
  end

  def clock = Process.clock_gettime(Process::CLOCK_MONOTONIC)

  # Upper bound, every request: the wait lies between the bytes' arrival and the response, inside
  # what the client measured; gvlscope's clock may be off by its calibration (within_clock_error)
  # and loop-wait's start by a jiffy.
  def assert_within_client(reply, report)
    assert_operator reply.waited, :<=, WaitTruth.within_clock_error(reply.client_ms) + KERNEL_JIFFY_MS,
                    "loop-wait + gvl-wait beyond the client's latency: #{reply}\n#{report}"
  end

  # (a) A quick request sent 50-100 ms into a 300 ms CPU burn on another fiber of the same loop,
  # on a new connection and on a kept-alive one (whose fiber is parked in the loop, waiting to read).
  def test_a_quick_request_behind_a_cpu_bound_fiber_reports_its_wait_for_the_loop
    server = start_falcon
    kept = kept_connection(server)
    3.times { timed_get(server, QUICK, kept) } # the code loaded, the connection's fiber parked
    timed_get(server, "/cpu?cpu_ms=20")
    alone = { fresh: Array.new(TRIES) { timed_get(server, QUICK) }, kept: Array.new(TRIES) { timed_get(server, QUICK, kept) } }
    tries = { fresh: [], kept: [] }
    burns = []
    TRIES.times do
      tries.each do |kind, list|
        burn = Thread.new { timed_get(server, BURN) }
        sleep rand(0.05..0.1)
        list << timed_get(server, QUICK, kind == :kept ? kept : nil)
        burns << burn.value
      end
    end
    kept.finish
    alone_ms = alone.transform_values { |replies| GVLScope::Units.median(replies.map(&:client_ms)) }
    report = "alone (median #{alone_ms.transform_values { |ms| ms.round(1) }}): #{alone}\nbeside: #{tries}\n" \
             "burns: #{burns}\n#{server.log}"
    warn report.lines.first(3).join if ENV["GVLSCOPE_TEST_VERBOSE"]
    replies = [*alone.values.flatten, *tries.values.flatten, *burns]
    replies.each { |reply| assert_equal "200", reply.status, report }
    assert_equal [worker_pid(replies.first)], replies.map(&:body).uniq, "one worker served them all: #{report}"
    assert_only_falcons_lines(server.log)
    [*alone.values.flatten, *tries.values.flatten].each do |reply|
      refute_nil reply.loop_wait, "no loop-wait in Server-Timing (a request on a fiber under Falcon's scheduler): #{reply}"
    end
    replies.each { |reply| assert_within_client(reply, report) }
    # Coverage. One reactor thread runs one fiber at a time, and the burn's fiber never yields:
    # from the moment the quick request's bytes reach the kernel until the burn ends, the quick
    # request's fiber (or, on a new connection, the loop's accept) cannot run. That wait is all
    # the quick request loses beyond the same request alone (its parse, app and write are the
    # same work either way), and it is the loop's: loop-wait, with gvl-wait for any GVL wait. 80 %
    # and 4 of 5 tries: a loaded 2-core machine may take the CPU from the server or the client
    # thread for a while, which delays the client but is no wait for the loop.
    tries.each do |kind, list|
      covered = list.count { |reply| reply.waited >= 0.8 * (reply.client_ms - alone_ms.fetch(kind)) }
      assert_operator covered, :>=, TRIES - 1, "#{kind}: loop-wait + gvl-wait against the delay: #{report}"
    end
  end

  # (b) Alone, no fiber holds the loop: between the bytes' arrival and the request's fiber getting
  # the thread, the worker only wakes from its select and resumes that fiber (on a new connection,
  # after accepting it). That is time its threads ran or waited for a core, which the kernel counts
  # (/proc/PID/task/*/schedstat): loop-wait is at most that, plus a jiffy for its start, however
  # loaded the machine is.
  def test_alone_the_loop_wait_is_the_loops_own_work_and_a_jiffy
    skip "no /proc/PID/schedstat (a kernel without CONFIG_SCHED_INFO)" unless File.exist?("/proc/self/schedstat")
    server = start_falcon
    kept = kept_connection(server)
    3.times { timed_get(server, QUICK, kept) }
    pid = worker_pid(timed_get(server, QUICK))
    measured = Array.new(2 * TRIES) do |i|
      before = on_cpu_or_runnable_ns(pid)
      reply = timed_get(server, QUICK, i.even? ? kept : nil)
      [reply, (on_cpu_or_runnable_ns(pid) - before) / 1e6]
    end
    kept.finish
    report = measured.map { |reply, busy_ms| "#{reply}, worker busy #{busy_ms.round(2)} ms" }.join("\n")
    warn report if ENV["GVLSCOPE_TEST_VERBOSE"]
    measured.each do |reply, busy_ms|
      assert_equal "200", reply.status, report
      refute_nil reply.loop_wait, "no loop-wait in Server-Timing: #{report}"
      assert_operator reply.loop_wait, :<=, WaitTruth.within_clock_error(busy_ms) + KERNEL_JIFFY_MS, report
    end
  end

  # gvlscope adds its Server-Timing entry and nothing else: the same requests to a Falcon without
  # it (GVLSCOPE_MIDDLEWARE=0) give the same statuses and headers, and Falcon's own log (its JSON
  # lines) reads the same from boot to the last response but for times, pids, ports and ids. Its
  # shutdown's lines are compared with nothing: whether a worker takes more than Falcon's grace to
  # stop ("Process is blocking, sending kill signal...") depends on the machine's load, with
  # gvlscope or without.
  def test_falcons_own_output_is_untouched
    runs = [{}, { "GVLSCOPE_MIDDLEWARE" => "0" }].map do |env|
      server = start_falcon(env: env)
      kept = kept_connection(server)
      burn = Thread.new { timed_get(server, BURN) }
      sleep 0.05
      replies = [timed_get(server, QUICK), timed_get(server, QUICK, kept), timed_get(server, "/fast", kept), burn.value]
      kept.finish
      served_log = server.log
      server.stop
      assert_only_falcons_lines(server.log)
      [replies, served_log]
    end
    (measured, measured_log), (plain, plain_log) = runs
    assert_equal plain.map(&:status), measured.map(&:status)
    assert_equal %w[200 200 200 200], measured.map(&:status)
    refute(plain.any? { |reply| reply.headers.key?("server-timing") })
    measured.zip(plain).each do |with, without|
      assert_includes with.headers.keys, "server-timing"
      assert_equal comparable_headers(without), comparable_headers(with)
    end
    assert_equal falcon_lines(plain_log), falcon_lines(measured_log), measured_log
  end

  # The harness at a tiny size (bench/wait_truth.rb --servers falcon-1): its Falcon boots, and every
  # response keeps the invariants, loop-wait included.
  def test_wait_truth_harness_runs_falcon
    result = WaitTruth.run("falcon-1", tries: 2, seed: 1, dir: @dir, connection: "keepalive")
    assert_equal [2, 2], [result.beside.size, result.alone.size]
    (result.beside + result.alone).each do |sample|
      assert_empty WaitTruth.broken_invariants(sample.parts, sample.latency_ms), sample.inspect
    end
    table = StringIO.new
    WaitTruth::Table.tries(result, table)
    result.beside.each { |sample| assert_includes sample.parts.keys, "loop-wait", table.string }
    assert_match(/^== falcon-1 keepalive: Falcon 0\.57\.\d+, forked, 1 process; keep-alive$/, table.string)
  end

  def worker_pid(reply) = Integer(reply.body).to_s

  # ns the process's threads have spent on a CPU and waiting for one (schedstat's first two fields).
  def on_cpu_or_runnable_ns(pid)
    Dir["/proc/#{pid}/task/*/schedstat"].sum { |path| File.read(path).split.first(2).sum(&:to_i) }
  end

  # Headers but the one gvlscope adds, with every number made 0 (the length of a body that is a pid,
  # x-burn's times).
  def comparable_headers(reply) = reply.headers.except("server-timing").transform_values { |values| values.map { |v| v.gsub(/\d+/, "0") } }

  # Falcon's log lines as [severity, subject, message] with every number made 0.
  def falcon_lines(log)
    log.lines.map do |line|
      entry = JSON.parse(line)
      message = entry["message"].is_a?(String) ? entry["message"] : JSON.generate(entry["message"])
      [entry["severity"], entry["subject"], message.gsub(/\d+/, "0")]
    rescue JSON::ParserError
      flunk "a line that is not Falcon's (JSON): #{line.inspect}\n#{log}"
    end
  end

  # Falcon writes its log as JSON lines (Console, to a file): a line of gvlscope's (a warning
  # written to stderr, a logger's line about a request) would be plain text, or have its subject.
  def assert_only_falcons_lines(log)
    falcon_lines(log).each do |_severity, subject, message|
      refute_match(/gvlscope/i, "#{subject} #{message[/\A\S*/]}", "gvlscope wrote into Falcon's log:\n#{log}")
    end
  end
end
