# frozen_string_literal: true

require_relative "../test_helper"
require_relative "../support/statsd_server"
require "socket"
require "logger"
require "stringio"

# GVLScope::StatsD against a real StatsD server (the statsd npm package: what it parsed and
# aggregated) and against a UDP socket of the test (the exact datagrams, DogStatsD tags included).
class StatsDTest < Minitest::Test
  include GVLScopeTestHelper

  Timing = Struct.new(:run_ns, :wait_ns, :idle_ns, :gc_ns, :duration_ns)
  SHOW = Timing.new(2_000_000, 3_000_000, 500_000, 0, 5_500_000)  # 3 ms of GVL wait: bucket 22, <= 4.194 ms
  INDEX = Timing.new(1_000_000, 0, 0, 250_000, 1_250_000)         # no wait: bucket 0
  QUEUED = Struct.new(*Timing.members, :queue_latency_ns).new(*SHOW.to_a, 4_900_000_000) # a job 4.9 s in its queue

  def setup
    GVLScope::StatsD.stop
    GVLScope::Breakdown.reset!
    @logged = StringIO.new
    @logger = Logger.new(@logged, formatter: ->(_severity, _time, _progname, message) { "#{message}\n" })
  end

  def teardown
    GVLScope::StatsD.stop
    GVLScope::Breakdown.reset!
  end

  def record_requests
    2.times { GVLScope::Breakdown.record(:route, "UsersController#show", SHOW) }
    GVLScope::Breakdown.record(:route, "GET /users/:id/posts", INDEX)
    GVLScope::Breakdown.record(:job, "HardJob", QUEUED, { queue: "default" })
  end

  # A UDP socket of the test's: what the exporter sends, datagram by datagram.
  def with_receiver
    receiver = UDPSocket.new
    receiver.bind("127.0.0.1", 0)
    yield receiver, receiver.addr[1]
  ensure
    GVLScope::StatsD.stop # its last flush goes to the receiver, not to a closed port
    receiver&.close
  end

  # The real server, stopped after the exporter (whose last flush it then still receives).
  def with_statsd_server
    StatsDServer.run(self) do |server|
      yield server
    ensure
      GVLScope::StatsD.stop
    end
  end

  def datagrams(receiver, wait: 2)
    found = []
    while receiver.wait_readable(found.empty? ? wait : 0.2)
      found << receiver.recv(65_536)
    end
    found
  end

  def test_dogstatsd_lines_are_exact_for_routes_and_jobs
    with_receiver do |receiver, port|
      exporter = GVLScope::StatsD.start(port: port, every: 3600, prefix: "gvl")
      record_requests
      lines = exporter.flush
      sent = datagrams(receiver).flat_map { |datagram| datagram.split("\n") }
      assert_equal lines, sent, "what #flush returns is what went on the wire"

      route = sent.grep(/\|#route:UsersController#show\z/)
      assert_equal ["gvl.route.requests:2|c|#route:UsersController#show",
                    "gvl.route.run_ms:4|c|#route:UsersController#show",
                    "gvl.route.gvl_wait_ms:6|c|#route:UsersController#show",
                    "gvl.route.idle_ms:1|c|#route:UsersController#show",
                    "gvl.route.gc_ms:0|c|#route:UsersController#show",
                    "gvl.route.duration_ms:11|c|#route:UsersController#show",
                    "gvl.route.pickup_wait_ms:0|c|#route:UsersController#show",
                    "gvl.route.gvl_wait_p50_ms:4.194|g|#route:UsersController#show",
                    "gvl.route.gvl_wait_p99_ms:4.194|g|#route:UsersController#show"], route
      # A label's spaces become "_" (a tag value cannot hold them); ":" and "/" stay.
      assert_includes sent, "gvl.route.requests:1|c|#route:GET_/users/:id/posts"
      assert_includes sent, "gvl.route.gvl_wait_p99_ms:0|g|#route:GET_/users/:id/posts"
      assert_includes sent, "gvl.route.gc_ms:0.25|c|#route:GET_/users/:id/posts"
      assert_includes sent, "gvl.job.executions:1|c|#job:HardJob,queue:default"
      assert_includes sent, "gvl.job.gvl_wait_ms:3|c|#job:HardJob,queue:default"
      assert_includes sent, "gvl.job.queue_latency_ms:4900|c|#job:HardJob,queue:default"
      assert_empty sent.grep(/route\.queue_latency/), "requests have no enqueued_at"

      process = sent.grep_v(/\|#/)
      assert_equal %w[gvl.gvl.held_ratio gvl.waiting_threads gvl.gvl.waits gvl.gvl.wait_ms],
                   process.first(4).map { |line| line[/\A[^:]+/] }
      held_ratio = Float(process[0][/:(.*)\|g\z/, 1])
      assert_operator held_ratio, :>, 0.0, "this thread held the GVL while recording"
      assert_operator held_ratio, :<=, 1.0
      assert_match(/\Agvl\.waiting_threads:\d+\|g\z/, process[1])
    end
  end

  def test_each_flush_sends_the_interval_only_and_idle_series_send_nothing
    with_receiver do |receiver, port|
      exporter = GVLScope::StatsD.start(port: port, every: 3600)
      record_requests
      exporter.flush
      datagrams(receiver)
      GVLScope::Breakdown.record(:route, "UsersController#show", INDEX)
      sent = exporter.flush
      routes = sent.grep(/\|#/)
      assert_equal ["gvlscope.route.requests:1|c|#route:UsersController#show",
                    "gvlscope.route.run_ms:1|c|#route:UsersController#show",
                    "gvlscope.route.gvl_wait_ms:0|c|#route:UsersController#show",
                    "gvlscope.route.idle_ms:0|c|#route:UsersController#show",
                    "gvlscope.route.gc_ms:0.25|c|#route:UsersController#show",
                    "gvlscope.route.duration_ms:1.25|c|#route:UsersController#show",
                    "gvlscope.route.pickup_wait_ms:0|c|#route:UsersController#show",
                    "gvlscope.route.gvl_wait_p50_ms:0|g|#route:UsersController#show",
                    "gvlscope.route.gvl_wait_p99_ms:0|g|#route:UsersController#show"], routes
    end
  end

  def test_what_happened_before_start_is_not_sent
    record_requests
    with_receiver do |_receiver, port|
      exporter = GVLScope::StatsD.start(port: port, every: 3600)
      assert_empty exporter.flush.grep(/route|job/)
    end
  end

  def test_sampled_series_carry_their_rate
    with_receiver do |_receiver, port|
      exporter = GVLScope::StatsD.start(port: port, every: 3600)
      GVLScope::Breakdown.record(:job, "HardJob", SHOW, { queue: "low" }, 0.25)
      lines = exporter.flush
      assert_includes lines, "gvlscope.job.executions:1|c|@0.25|#job:HardJob,queue:low"
      assert_includes lines, "gvlscope.job.gvl_wait_p99_ms:4.194|g|#job:HardJob,queue:low", "gauges are not scaled"
    end
  end

  # The real server: it parses every line (no bad lines), aggregates the counters (scaling the
  # sampled ones), keeps the tags in its keys (statsd 0.9 turns DogStatsD tags into ";tag=value").
  def test_a_real_statsd_server_aggregates_what_is_sent
    with_statsd_server do |server|
      exporter = GVLScope::StatsD.start(port: server.port, every: 3600)
      record_requests
      GVLScope::Breakdown.record(:job, "SampledJob", SHOW, { queue: "low" }, 0.5)
      exporter.flush
      server.wait_for("the job's counter") { |s| s.flushes.any? { |f| f["counters"].key?("gvlscope.job.executions;job=SampledJob;queue=low") } }
      counters = server.counters
      gauges = server.gauges
      assert_equal 0, counters["statsd.bad_lines_seen"], server.log
      assert_equal 2, counters["gvlscope.route.requests;route=UsersControllershow"]
      assert_in_delta 6.0, counters["gvlscope.route.gvl_wait_ms;route=UsersControllershow"], 1e-9
      assert_equal 1, counters["gvlscope.route.requests;route=GET_-users-id-posts"]
      assert_equal 1, counters["gvlscope.job.executions;job=HardJob;queue=default"]
      assert_equal 2, counters["gvlscope.job.executions;job=SampledJob;queue=low"], "one sampled at 0.5 counts as 2"
      assert_in_delta 4.194, gauges["gvlscope.route.gvl_wait_p99_ms;route=UsersControllershow"], 1e-9
      assert_includes gauges, "gvlscope.gvl.held_ratio"
      assert_includes gauges, "gvlscope.waiting_threads"
      assert_includes counters, "gvlscope.gvl.waits"
    end
  end

  def test_without_tags_the_labels_go_into_the_names_for_a_plain_statsd
    with_statsd_server do |server|
      exporter = GVLScope::StatsD.start(port: server.port, every: 3600, tags: false)
      record_requests
      lines = exporter.flush
      refute(lines.any? { |line| line.include?("|#") }, lines.join("\n"))
      assert_includes lines, "gvlscope.route.UsersController_show.requests:2|c"
      assert_includes lines, "gvlscope.route.GET_users_id_posts.requests:1|c"
      assert_includes lines, "gvlscope.job.HardJob.default.gvl_wait_ms:3|c"
      server.wait_for("the job's counter") { |s| s.flushes.any? { |f| f["counters"].key?("gvlscope.job.HardJob.default.executions") } }
      assert_equal 0, server.counters["statsd.bad_lines_seen"], server.log
      assert_equal 2, server.counters["gvlscope.route.UsersController_show.requests"]
    end
  end

  # The thread flushes by itself every `every` seconds, and stop sends what is left and ends it.
  def test_the_thread_flushes_periodically_and_stops_cleanly
    with_statsd_server do |server|
      GVLScope::StatsD.start(port: server.port, every: 0.1)
      assert GVLScope::StatsD.running?
      error = assert_raises(GVLScope::Error) { GVLScope::StatsD.start(port: server.port) }
      assert_equal "GVLScope::StatsD: already running (GVLScope::StatsD.stop first)", error.message
      server.wait_for("two flushes with the process gauges") { |s| s.packets.count { |p| p.include?("gvlscope.gvl.held_ratio") } >= 2 }
      GVLScope::Breakdown.record(:route, "Last#request", INDEX)
      assert GVLScope::StatsD.stop
      refute GVLScope::StatsD.running?
      refute(Thread.list.any? { |thread| thread.name == "gvlscope statsd" }, "the thread ended")
      server.wait_for("the last flush") { |s| s.packets.any? { |p| p.include?("gvlscope.route.requests:1|c|#route:Last#request") } }
      refute GVLScope::StatsD.stop, "nothing left to stop"
    end
  end

  # A server that is not there: sends are refused (ICMP port unreachable), the exporter keeps
  # going and warns once, however many flushes fail.
  def test_an_unreachable_server_gives_one_warning_and_the_app_goes_on
    with_receiver { |_receiver, port| @closed_port = port } # bound, then closed: nobody listens there
    exporter = GVLScope::StatsD.start(port: @closed_port, every: 0.02, logger: @logger)
    served = 0
    # Until 100 requests are served and 5 sends refused: a busy machine takes longer, a blocked
    # app never gets there (the deadline is for that).
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 60
    until (served >= 100 && exporter.dropped_datagrams >= 5) || Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
      200.times { |i| i * i } # an app: some work, some IO
      sleep 0.001
      served += 1
    end
    assert_operator served, :>=, 100
    assert GVLScope::StatsD.running?
    assert_operator exporter.dropped_datagrams, :>=, 5, "refused sends are counted"
    warnings = @logged.string.lines
    assert_equal 1, warnings.size, @logged.string
    assert_match(/\Agvlscope: GVLScope::StatsD: cannot send to 127\.0\.0\.1:#{@closed_port}: Connection refused/, warnings.first)
  end

  def test_bad_options_raise_one_line_at_start
    {
      { hots: "x" } => "GVLScope::StatsD: unknown option :hots (known: host, port, every, prefix, tags, logger, max_packet_bytes)",
      { port: "8125" } => 'GVLScope::StatsD: port must be an Integer in 1..65535, got "8125"',
      { port: 0 } => "GVLScope::StatsD: port must be an Integer in 1..65535, got 0",
      { every: 0 } => "GVLScope::StatsD: every must be a number of seconds > 0, got 0",
      { host: "" } => 'GVLScope::StatsD: host must be a non-empty String, got ""',
      { prefix: "my app" } => 'GVLScope::StatsD: prefix must be a String of letters, digits, _, - and inner dots, got "my app"',
      { tags: "yes" } => 'GVLScope::StatsD: tags must be true or false, got "yes"',
      { max_packet_bytes: 10 } => "GVLScope::StatsD: max_packet_bytes must be an Integer in 64..65000, got 10",
    }.each do |options, message|
      error = assert_raises(GVLScope::Error, options.inspect) { GVLScope::StatsD.start(**options) }
      assert_equal message, error.message
      refute GVLScope::StatsD.running?
    end
  end

  # Lines are packed into datagrams up to max_packet_bytes, never split.
  def test_datagrams_stay_under_the_size_limit
    with_receiver do |receiver, port|
      exporter = GVLScope::StatsD.start(port: port, every: 3600, max_packet_bytes: 200)
      20.times { |i| GVLScope::Breakdown.record(:route, "Route#{i}#show", SHOW) }
      lines = exporter.flush
      sent = datagrams(receiver)
      assert_operator sent.size, :>, 10
      sent.each { |datagram| assert_operator datagram.bytesize, :<=, 200 }
      assert_equal lines, sent.flat_map { |datagram| datagram.split("\n") }
    end
  end

  # A forked child (a Puma worker) runs its own thread with its own numbers: a route recorded only
  # in the child arrives, sent from the child's pid.
  def test_a_forked_child_sends_its_own_numbers
    with_receiver do |receiver, port|
      out, err, status = run_ruby(<<~RUBY)
        require "gvlscope"
        Timing = Struct.new(:run_ns, :wait_ns, :idle_ns, :gc_ns, :duration_ns)
        GVLScope::StatsD.start(port: #{port}, every: 0.05)
        GVLScope::Breakdown.record(:route, "Parent#before_fork", Timing.new(1, 0, 0, 0, 1))
        pid = fork do
          GVLScope::Breakdown.record(:route, "Child#only", Timing.new(1_000_000, 0, 0, 0, 1_000_000))
          sleep 0.5
          GVLScope::StatsD.stop
          exit!(GVLScope::Breakdown.snapshot.map(&:label) == ["Child#only"] ? 0 : 1)
        end
        Process.wait(pid)
        puts $?.exitstatus
        sleep 0.2
        GVLScope::StatsD.stop
      RUBY
      assert status.success?, err
      assert_equal "0", out.strip, "the child's Breakdown held only its own route"
      lines = datagrams(receiver, wait: 1).flat_map { |datagram| datagram.split("\n") }
      assert_includes lines, "gvlscope.route.requests:1|c|#route:Child#only"
      assert_equal 1, lines.count("gvlscope.route.requests:1|c|#route:Parent#before_fork"),
                   "the parent's route is sent once, by the parent: the child starts from zero"
    end
  end
end
