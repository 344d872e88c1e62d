# frozen_string_literal: true

require "test_helper"
require "net/http"
require "tmpdir"
require "timeout"
require "gvlscope/live"
require "gvlscope/integrations/route_label"
require_relative "../support/puma_process"

# Real Puma processes on loopback ports, real HTTP: the middleware's Server-Timing under
# contention, the plugin's per-worker metrics and /metrics in cluster mode, the flight recorder
# dumping for a slow request, and boot errors for bad config. Every wait has a timeout and every
# server is killed in ensure, so nothing here can hang CI.
class PumaTest < Minitest::Test
  APP = File.join(GVLScopeTestHelper::ROOT, "test/fixtures/web/app.ru")
  BOOT_TIMEOUT = 60

  include PumaProcess
  include GVLScopeTestHelper

  def setup
    @dir = Dir.mktmpdir("gvlscope-puma")
    @servers = []
  end

  def teardown
    @servers.each { |server| stop(server) }
    FileUtils.rm_rf(@dir)
  end

  # Starts `puma -C config` in a child Ruby (with this checkout's lib and the bundle, or the
  # gemfile's: another Puma) and waits until it listens (and, in cluster mode, every worker booted).
  def start_puma(config, env: {}, workers: 0, wait: true, gemfile: nil)
    config_path = File.join(@dir, "puma-#{@servers.size}.rb")
    File.write(config_path, <<~RUBY)
      bind "tcp://127.0.0.1:0"
      threads 5, 5
      workers #{workers}
      rackup #{APP.inspect}
      environment "test"
      #{config}
    RUBY
    log_path = File.join(@dir, "puma-#{@servers.size}.log")
    puma = [Gem.bin_path("puma", "puma")]
    if gemfile # that bundle's Puma, found in the child
      env = env.merge("BUNDLE_GEMFILE" => File.join(GVLScopeTestHelper::ROOT, gemfile), "RUBYOPT" => nil)
      puma = ["-rbundler/setup", "-e", 'load Gem.bin_path("puma", "puma")', "--"]
    end
    pid = Process.spawn(env, RbConfig.ruby, "-I", File.join(GVLScopeTestHelper::ROOT, "lib"), *puma,
                        "-C", config_path, out: log_path, err: [:child, :out], pgroup: true)
    server = Server.new(pid, log_path)
    @servers << server
    return server unless wait

    wait_for(server, BOOT_TIMEOUT) do |log|
      log[%r{Listening on http://127\.0\.0\.1:(\d+)}] && (workers.zero? || log.scan(/Worker \d+ \(PID: \d+\) booted/).size >= workers)
    end
    server.port = Integer(server.log[%r{Listening on http://127\.0\.0\.1:(\d+)}, 1])
    server.metrics_port = server.log[%r{GVL metrics on http://127\.0\.0\.1:(\d+)/metrics}, 1]&.to_i
    server
  end

  def wait_for(server, seconds)
    deadline = clock + seconds
    until yield(server.log)
      flunk "puma did not get there in #{seconds} s:\n#{server.log}" if clock > deadline
      flunk "puma exited:\n#{server.log}" if Process.waitpid(server.pid, Process::WNOHANG)
      sleep 0.05
    end
  end

  def get(port, path)
    Net::HTTP.start("127.0.0.1", port, open_timeout: 10, read_timeout: 30) { |http| http.get(path) }
  end

  def server_timing(response)
    response["server-timing"].split(", ").to_h { |entry| name, ms = entry.split(";dur="); [name, Float(ms)] }
  end

  # A quick request sent at a moment users choose (20-100 ms into a 300 ms CPU burn on another
  # pool thread), every try kept. What the client waited beyond the same request alone was spent
  # in the server, where the request's own Ruby takes microseconds: the server thread woke for the
  # connection and waited for the GVL, the pool thread it handed the connection to waited again
  # (and took Puma's locks). Server-Timing's gvl-wait must carry that wait; `queue` is the time
  # from the connection's arrival (the server thread's wake) to the app.
  def test_server_timing_carries_the_wait_the_client_saw_beside_a_cpu_request
    server = start_puma("")
    Array.new(5) { Thread.new { get(server.port, "/cpu?cpu_ms=30") } }.each(&:join) # every pool thread once
    3.times { get(server.port, "/fast") }
    alone = Array.new(5) do
      sent = clock
      response = get(server.port, "/fast")
      [(clock - sent) * 1000, server_timing(response)["gvl-wait"]]
    end
    alone_ms = alone.map(&:first).sort[2]

    tries = Array.new(6) do
      cpu = Thread.new { get(server.port, "/cpu?cpu_ms=300") }
      sleep rand(0.02..0.1)
      sent = clock
      response = get(server.port, "/fast")
      client_ms = (clock - sent) * 1000
      cpu.join
      server_timing(response).merge("client" => client_ms)
    end

    report = tries.map { |t| t.transform_values { |ms| ms.round(1) } }
    warn "alone #{alone.inspect}; tries #{report.inspect}" if ENV["GVLSCOPE_TEST_VERBOSE"]
    # Alone, the GVL is free: a hand-over takes microseconds (a loaded machine: a few ms at most).
    assert_operator alone.map(&:last).sort[2], :<, 5, "alone: #{alone.inspect}"
    tries.each do |try|
      # The server's figures lie inside what the client measured.
      assert_operator try["gvl-wait"], :<=, try["client"] + 0.5, report.inspect
      assert_operator try.fetch("queue", 0), :<=, try["client"] + 0.5, report.inspect
    end
    # Beside the burn the request waited for the GVL at least once, on the server thread or the
    # pool thread, unless the burn was over before it arrived; the wait is most of what it lost.
    delayed = tries.select { |try| try["client"] - alone_ms > 50 }
    refute_empty delayed, "no try was delayed beside a 300 ms burn: #{report.inspect}"
    explained = delayed.count { |try| try["gvl-wait"] >= 0.5 * (try["client"] - alone_ms) }
    assert_operator explained, :>=, (delayed.size + 1) / 2, "gvl-wait vs the client's delay (alone #{alone_ms.round(1)} ms): #{report.inspect}"
  end

  def test_cluster_workers_report_their_own_metrics_and_metrics_parses
    server = start_puma("plugin :gvlscope\ngvlscope log_interval: 1, prometheus_port: 0", workers: 2)
    # Held time before any request (both workers reported): on a loaded machine booting alone can
    # hold the GVL for more than the slack below, so the bounds are on what the requests added.
    booted = scrape_until(server, "both workers reported") { |m| held_by_pid(m).size == 2 }
    # Which worker answers is the kernel's choice: each /cpu response says who served it.
    cpu_requests = Hash.new(0)
    8.times { cpu_requests[Integer(get(server.port, "/cpu").body)] += 1 }
    (1..5).each { |id| get(server.port, "/items/#{id}") } # the app has no router: the path template
    # Every worker reported (once a second) after its last request: all 13 requests counted.
    metrics = scrape_until(server, "13 requests counted") do |m|
      m.values.select { |name, _, _| name == "gvlscope_route_requests_total" }.sum(&:last) == 13
    end
    wait_for(server, 30) { |log| log.match?(/gvlscope worker [01] \(pid \d+\): /) }

    assert_equal "counter", metrics.types["gvlscope_gvl_held_seconds_total"]
    assert_equal "histogram", metrics.types["gvlscope_gvl_wait_seconds"]
    held = metrics.values.select { |name, _, _| name == "gvlscope_gvl_held_seconds_total" }
    assert_equal 2, held.size, held.inspect
    assert_equal %w[0 1], held.map { |_, labels, _| labels["worker"] }.sort
    pids = server.log.scan(/Worker \d+ \(PID: (\d+)\) booted/).flatten.map(&:to_i)
    held.each do |_, labels, seconds|
      pid = Integer(labels["pid"])
      assert_includes pids, pid
      # What each worker's held time grew by is its own CPU requests (0.2 s each, a wall-clock
      # burn holding the GVL), not the other's (another 0.6 s or more whenever it served 3).
      grown = seconds - held_by_pid(booted).fetch(pid)
      expected = 0.2 * cpu_requests[pid]
      assert_operator grown, :>=, 0.8 * expected, "worker #{pid}: grew #{grown.round(3)} s, #{cpu_requests.inspect}"
      assert_operator grown, :<=, expected + 0.5, "worker #{pid}: grew #{grown.round(3)} s, #{cpu_requests.inspect}"
    end
    # Per-route series from each worker, through the master: /cpu counted where it was served.
    routes = metrics.values.select { |name, _, _| name == "gvlscope_route_requests_total" }
    cpu_by_pid = routes.filter_map { |_, labels, count| [Integer(labels["pid"]), count] if labels["route"] == "GET /cpu" }.to_h
    assert_equal cpu_requests.select { |_, count| count.positive? }, cpu_by_pid
    assert_equal 5, routes.select { |_, labels, _| labels["route"] == "GET /items/:id" }.sum(&:last)
    assert_equal ["GET /cpu", "GET /items/:id"], routes.map { |_, labels, _| labels["route"] }.uniq.sort
    assert_match(/gvlscope worker [01] \(pid \d+\): [\d.]+ s, GVL held [\d.]+%, waiting threads now \d+/, server.log)
    assert_equal "404", get(server.metrics_port, "/").code
  end

  # Any HTTP client chooses its path: requests with 3 KB paths (26 to one worker were enough) used
  # to make datagrams the master read cut and dropped without a word, legitimate routes in them
  # included, for good.
  def test_long_paths_leave_the_clusters_per_route_metrics_whole
    server = start_puma("plugin :gvlscope\ngvlscope log_interval: 0, prometheus_port: 0", workers: 2)
    ("a".."z").first(20).product(%w[x y z]).each { |a, b| get(server.port, "/#{a}#{b}#{'q' * 3000}") } # letters: no id
    (1..5).each { |id| get(server.port, "/items/#{id}") }
    metrics = scrape_until(server, "65 requests counted") do |m|
      m.values.select { |name, _, _| name == "gvlscope_route_requests_total" }.sum(&:last) == 65
    end
    routes = metrics.values.select { |name, _, _| name == "gvlscope_route_requests_total" }
    assert_equal 5, routes.select { |_, labels, _| labels["route"] == "GET /items/:id" }.sum(&:last)
    routes.each { |_, labels, _| assert_operator labels["route"].bytesize, :<=, GVLScope::RouteLabel::MAX_LABEL_BYTES }
    dropped = metrics.values.select { |name, _, _| name == "gvlscope_puma_worker_reports_dropped_total" }
    assert_equal [[{}, 0]], dropped.map { |_, labels, value| [labels, value] }
  end

  # Scrapes /metrics until the block accepts the parsed text (up to 30 s); returns it.
  def scrape_until(server, what)
    deadline = clock + 30
    loop do
      metrics = PrometheusText.parse(get(server.metrics_port, "/metrics").body)
      return metrics if yield(metrics)
      flunk "/metrics: not #{what} in 30 s:\n#{server.log}" if clock > deadline

      sleep 0.1
    end
  end

  def held_by_pid(metrics)
    metrics.values.filter_map { |name, labels, seconds| [Integer(labels["pid"]), seconds] if name == "gvlscope_gvl_held_seconds_total" }.to_h
  end

  def test_metrics_can_be_summed_over_workers
    server = start_puma("plugin :gvlscope\ngvlscope log_interval: 0, prometheus_port: 0, prometheus_per_worker: false",
                        workers: 2)
    sleep 2.5
    metrics = PrometheusText.parse(get(server.metrics_port, "/metrics").body)
    wall = metrics.values.select { |name, _, _| name == "gvlscope_wall_seconds_total" }
    assert_equal 1, wall.size
    assert_empty wall.first[1]
    # Two workers' wall time: about twice the time since they booted.
    assert_operator wall.first[2], :>=, 2 * 1.5
  end

  # `gvlscope top` on both of the plugin's live sources: each worker's socket (live: true) and the
  # master's /metrics (the scrape path), with real requests in between.
  def test_top_reads_each_workers_live_socket_and_the_metrics_endpoint
    server = start_puma("plugin :gvlscope\ngvlscope log_interval: 0, prometheus_port: 0, live: true", workers: 2)
    workers = server.log.scan(/Worker \d+ \(PID: (\d+)\) booted/).flatten.map(&:to_i)
    wait_for(server, BOOT_TIMEOUT) { |log| workers.all? { |pid| log.include?("gvlscope top #{pid}") } }
    requests = Thread.new { 6.times { get(server.port, "/cpu") } }
    out, err, status = gvlscope("top", "--once", "--interval", "1.5", workers.first.to_s)
    requests.join
    assert status.success?, err
    assert_match(/^gvlscope top · pid #{workers.first} /, out)
    assert_match(/^THREAD /, out)
    assert_match(/^puma srv tp \d+/, out, "Puma's pool threads (named by Puma) are rows")

    sleep 2.5 # each worker reported to the master (once a second)
    url = "http://127.0.0.1:#{server.metrics_port}/metrics"
    out, err, status = gvlscope("top", "--once", "--json", "--url", url)
    assert status.success?, err
    snapshot = GVLScope::Live::Snapshot.from_json(out)
    assert_equal "prometheus", snapshot.source
    assert_equal workers.sort, snapshot.workers.map(&:pid).sort
    assert_equal [0, 1], snapshot.workers.map(&:worker).sort
    assert_empty snapshot.threads
    # Workers report once a second, so an interval's wall time is whole reports of 2 processes.
    assert_equal 2, snapshot.processes
    assert_operator snapshot.wall_ns, :>, 0
    assert_operator snapshot.held_ratio, :<=, 1.0

    out, err, status = gvlscope("top", "--once", "--url", url)
    assert status.success?, err
    assert_match(/^WORKER +PID +HELD%/, out)
    workers.each { |pid| assert_match(/^[01] +#{pid} +\d+\.\d%/, out) }
  end

  def test_a_slow_request_triggers_exactly_one_flight_recorder_dump
    dumps = File.join(@dir, "dumps")
    server = start_puma("", env: { "GVLSCOPE_FLIGHT_DIR" => dumps, "GVLSCOPE_FLIGHT_OVER_MS" => "150" })
    get(server.port, "/fast")
    threads = [Thread.new { get(server.port, "/cpu") }, Thread.new { sleep 0.05; get(server.port, "/fast") }]
    threads.each { |t| t.join(30) }
    get(server.port, "/cpu") # slow again, but within min_interval (60 s): no second dump
    deadline = clock + 15
    sleep 0.1 until Dir[File.join(dumps, "*.gvl")].any? || clock > deadline
    sleep 0.5

    files = Dir[File.join(dumps, "*.gvl")]
    assert_equal 1, files.size, server.log
    assert_match(/-get-cpu-duration-\d+-ms\.gvl\z/, files.first)
    trace = GVLScope::Model::TraceFile.read(files.first)
    refute trace.truncated?
    timeline = GVLScope::Model.timeline(files.first)
    threads = timeline.threads.values
    # Puma's pool threads around the slow request: one ran ~200 ms, another wanted the GVL then.
    assert_operator threads.count { |t| t.label.start_with?("puma srv tp") }, :>=, 2, threads.map(&:label).inspect
    longest_run = threads.map { |t| t.intervals.select { |i| i.state == :run }.sum(&:duration_ns) }.max
    assert_operator longest_run, :>=, 150_000_000
    assert(threads.any? { |t| t.intervals.any? { |i| i.state == :wait && i.duration_ns > 10_000_000 } })
  end

  def test_bad_plugin_config_stops_puma_at_boot_with_one_line
    busy = TCPServer.new("127.0.0.1", 0)
    {
      "gvlscope prometheus_prot: 9394" => /: gvlscope \(puma plugin\): unknown option :prometheus_prot .*\(GVLScope::Error\)$/,
      "gvlscope prometheus_port: #{busy.addr[1]}" =>
        /: gvlscope: cannot serve \/metrics on 127\.0\.0\.1:#{busy.addr[1]}: the port is in use \(GVLScope::Error\)$/,
      "gvlscope flight_recorder: { dir: '/proc/gvlscope-cannot-write' }" =>
        /: flight recorder: dump directory \/proc\/gvlscope-cannot-write is not writable .*\(GVLScope::Error\)$/,
    }.each do |line, message|
      server = start_puma("plugin :gvlscope\n#{line}", wait: false)
      Timeout.timeout(BOOT_TIMEOUT) { Process.wait(server.pid) }
      refute $?.success?
      assert_match message, server.log
      refute_match(/Listening on/, server.log)
    end
  ensure
    busy&.close
  end

  # Every Puma family the docs name (6, 7.0 before Server#new_client, 7.2, 8), a real server each:
  # a quick request beside a CPU-bound one, on a new connection and on a kept-alive one (which
  # comes back through Puma's reactor thread). Each must carry the wait before the app (`queue`,
  # and its GVL part in gvl-wait), inside what the client measured.
  PUMA_FAMILIES = { "6" => "gemfiles/puma6.gemfile", "7.0" => "gemfiles/puma7.0.gemfile",
                    "7" => "gemfiles/puma7.gemfile", "8" => "Gemfile" }.freeze

  PUMA_FAMILIES.each do |family, gemfile|
    define_method(:"test_puma_#{family.tr('.', '_')}_counts_the_wait_before_the_app_on_new_and_kept_alive_connections") do
      server = start_puma("threads 2, 2", gemfile: gemfile)
      version = server.log[/Puma version: ([\d.]+)/, 1]
      assert version&.start_with?("#{family}."), server.log
      refute_match(/only the wait inside the app/, server.log)
      Net::HTTP.start("127.0.0.1", server.port, open_timeout: 10, read_timeout: 30) do |kept|
        Array.new(2) { Thread.new { get(server.port, "/cpu?cpu_ms=20") } }.each(&:join) # both pool threads once
        alone = Array.new(5) do
          sent = clock
          kept.get("/fast") # the connection is kept: its next requests come through the reactor
          (clock - sent) * 1000
        end.sort[2]
        tries = { fresh: [], kept: [] }
        6.times do |i|
          kind = i.even? ? :kept : :fresh
          cpu = Thread.new { get(server.port, "/cpu?cpu_ms=300") }
          sleep 0.05
          sent = clock
          response = kind == :kept ? kept.get("/fast") : get(server.port, "/fast")
          tries[kind] << server_timing(response).merge("client" => (clock - sent) * 1000)
          cpu.join
        end
        report = "Puma #{version}, alone #{alone.round(1)} ms: #{tries.inspect}"
        tries.each_value.flat_map(&:itself).each do |try|
          # Inside what the client measured (within the clocks' error).
          assert_operator try["gvl-wait"], :<=, try["client"] * 1.01 + 0.5, report
          assert_operator try.fetch("queue", 0), :<=, try["client"] * 1.01 + 0.5, report
          assert_operator try.fetch("queue-gvl", 0), :<=, try.fetch("queue", 0) + 0.002, report
        end
        # 50 ms into a 300 ms burn on the other thread, a quick request waits for the GVL on its
        # way to the app (the thread that readied it, then the pool thread: up to a timeslice,
        # 100 ms, each): the wait before the app is seen, on a kept-alive connection too (the
        # reactor thread woke for it and waited). At least half the tries of each kind (a loaded
        # machine may start the burn late, or delay a request on its way to a core).
        tries.each do |kind, list|
          seen = list.count { |try| try.key?("queue") && try["queue-gvl"] >= 0.5 * (try["client"] - alone) }
          assert_operator seen, :>=, list.size / 2, "#{kind}: #{report}"
        end
      end
    end
  end
end
