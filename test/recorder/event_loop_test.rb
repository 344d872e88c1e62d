# frozen_string_literal: true

require "test_helper"
require "socket"
require "gvlscope/rack"
require_relative "../../lab/tiny_scheduler"

# Event loops (ext/gvlscope/fibers.c): a request on a fiber of a thread with a Fiber scheduler
# waits for the loop while another fiber keeps the thread, though no thread waits for the GVL.
class EventLoopTest < Minitest::Test
  include GVLScopeTestHelper

  MS = 1_000_000
  # The kernel's time for a socket's bytes is in jiffies (tcpi_last_data_recv): 4 ms at HZ 250,
  # this VM's; the arrival is taken a jiffy late when the loop was busy as they came (a lower bound).
  JIFFY_NS = 4 * MS

  # What Falcon gives a Rack app: env["protocol.http.request"].connection.stream.io is the socket.
  Stream = Struct.new(:io)
  Connection = Struct.new(:stream)
  Request = Struct.new(:connection)

  def env_for(socket)
    { "REQUEST_METHOD" => "GET", "PATH_INFO" => "/quick", "rack.input" => StringIO.new,
      "protocol.http.request" => Request.new(Connection.new(Stream.new(socket))) }
  end

  def now_ns = Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond)

  # Burns +ms+ of the thread's own CPU time: at least that much wall time, however loaded the machine.
  def burn(ms)
    deadline = Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) + ms / 1000.0
    x = 0
    x += 1 while Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) < deadline
  end

  def setup
    GVLScope::Native.loop_requests = true # as GVLScope::Rack does where Async is loaded (Falcon)
    GVLScope::Metrics.enable
    @server = TCPServer.new("127.0.0.1", 0)
    @client = TCPSocket.new("127.0.0.1", @server.addr[1])
    @connection = @server.accept
  end

  def teardown
    [@client, @connection, @server].each { |io| io&.close }
    GVLScope::EventLoops.track(false)
    GVLScope::Native.loop_requests = false
    GVLScope::Metrics.disable
  end

  # A loop thread: a request task waits for its bytes; a CPU task sends them, then keeps the thread
  # for 200 ms of CPU; the loop then finds them and resumes the request task, which runs the app
  # through GVLScope::Rack. Returns what each side saw.
  def serve_beside_a_cpu_task(burn_ms)
    seen = {}
    app = GVLScope::Rack.new(lambda { |env|
      seen[:app_ns] = now_ns
      seen[:timing] = env["gvlscope"]
      [200, {}, ["ok"]]
    }, route: false)
    Thread.new do
      Fiber.set_scheduler(TinyScheduler.new)
      Fiber.schedule do # a first request turns tracking on (its own turn is not known)
        app.call(env_for(@connection))
        @connection.wait_readable
        @connection.read_nonblock(64)
        seen[:response] = app.call(env_for(@connection))
      end
      Fiber.schedule do
        @client.write("GET /quick\r\n\r\n")
        seen[:written_ns] = now_ns
        burn(burn_ms)
        seen[:burnt_ns] = now_ns
      end
    end.join
    seen
  end

  def test_a_request_waits_for_the_loop_while_another_fiber_keeps_the_thread
    seen = serve_beside_a_cpu_task(200)
    timing = seen.fetch(:timing)
    assert_predicate timing, :loop_wait_known?
    # Its bytes came as the CPU task began (within a jiffy, read a jiffy late); its turn began after
    # that task gave the thread back, and before the app ran. The GVL wait in between (any other
    # thread of the test process) is gvl-wait's, not the loop's.
    waited = timing.loop_wait_ns + timing.pickup_wait_ns
    assert_operator waited, :>=, seen[:burnt_ns] - seen[:written_ns] - 2 * JIFFY_NS, timing.inspect
    assert_operator timing.loop_wait_ns, :<=, seen[:app_ns] - seen[:written_ns], timing.inspect
    assert_operator timing.loop_wait_ns, :>=, 150 * MS, "200 ms of CPU: the wall time is at least that"
    header = seen.fetch(:response)[1]["server-timing"]
    assert_match(/\Agvl-wait;dur=[\d.]+, loop-wait;dur=#{format('%.3f', timing.loop_wait_ns / 1e6).sub(/\.?0+\z/, '')}, gvl-run/, header)
    assert_match(/queue-loop;dur=/, header)
    assert_includes timing.to_h.keys, :loop_wait_ms
  end

  def test_the_loops_turns_are_counted_with_the_longest
    before = GVLScope::EventLoops.turns
    serve_beside_a_cpu_task(120)
    turns = GVLScope::EventLoops.turns - before # the loop's thread has exited: its turns are kept
    assert_operator turns.turns, :>=, 2 # the CPU task's, the request task's after it
    assert_operator turns.longest_turn_ns, :>=, 120 * MS * 0.99 # 120 ms of CPU clock, on the trace's clock (TSC): within 1 %
    assert_operator turns.busy_ns, :>=, 120 * MS * 0.99
    assert_equal turns.turns, turns.turn_histogram.sum
    assert_operator turns.turn_histogram[27..].sum, :>=, 1, "a turn of 2^26 ns (67 ms) or more"
    # Always-on metrics: the turns beside the GVL's, for Prometheus (what Node.js calls event-loop delay).
    snapshot = GVLScope::Metrics.snapshot
    text = snapshot.to_prometheus
    assert_includes text, "gvlscope_event_loop_turns_total #{snapshot.loops.turns}\n"
    assert_includes text, "gvlscope_event_loop_turn_seconds_count #{snapshot.loops.turns}\n"
    assert_operator snapshot.loops.turns, :>=, turns.turns
    GVLScope::Metrics.reset # every counter, the loops' too
    assert_equal GVLScope::EventLoops::NONE, GVLScope::EventLoops.turns
  end

  # Two requests on one loop, started as Falcon starts a connection's task (by its acceptor's, at
  # once, inside that task's turn): one reads a pipe the other writes after 200 ms of CPU. Each
  # request's run, wait and GC are its own fiber's; the reader's time suspended is idle.
  def test_a_requests_numbers_are_its_own_fibers_not_its_threads
    reader, writer = IO.pipe
    app = GVLScope::Rack.new(lambda { |env|
      if env["PATH_INFO"] == "/read"
        reader.read(1)
      else
        burn(200)
        writer.write("x")
      end
      [200, {}, ["ok"]]
    }, route: false)
    timings = {}
    Thread.new do
      Fiber.set_scheduler(TinyScheduler.new)
      Fiber.schedule do # the acceptor
        %w[/read /burn].each do |path|
          Fiber.schedule do
            env = { "REQUEST_METHOD" => "GET", "PATH_INFO" => path, "rack.input" => StringIO.new }
            app.call(env)
            timings[path] = env["gvlscope"]
          end
        end
      end
    end.join
    reading, burning = timings.fetch("/read"), timings.fetch("/burn")
    assert_operator burning.run_ns, :>=, 200 * MS * 0.99, "200 ms of CPU clock, on the trace's clock: within 1 %"
    # The reader's own work is a read and a write of a few bytes: what the OS could deschedule it for
    # on a loaded machine is a few timeslices, far from the other request's 200 ms.
    assert_operator reading.run_ns + reading.gc_ns, :<, 100 * MS, reading.inspect
    assert_operator reading.duration_ns, :>=, burning.run_ns, "it waited for the other's write"
    # Its time is whole: what it did not hold the thread for, its fiber was suspended (idle).
    assert_equal reading.duration_ns, reading.run_ns + reading.wait_ns + reading.idle_ns + reading.gc_ns - reading.pickup_wait_ns
    assert_operator reading.idle_ns, :>=, burning.run_ns - 100 * MS
  ensure
    [reader, writer].each { |io| io&.close }
  end

  # A request on a loop's fiber whose wait (+wait+, in the app) becomes ready as another fiber
  # begins 200 ms of CPU (+ready+, in that fiber, then the burn): its RequestTiming.
  def request_ready_beside_a_burn(wait, ready, scheduler: TinyScheduler)
    timing = nil
    app = GVLScope::Rack.new(lambda { |env|
      wait.call
      timing = env["gvlscope"]
      [200, {}, ["ok"]]
    }, route: false)
    Thread.new do
      Fiber.set_scheduler(scheduler.new)
      Fiber.schedule { app.call({ "REQUEST_METHOD" => "GET", "PATH_INFO" => "/", "rack.input" => StringIO.new }) }
      Fiber.schedule do
        ready.call
        burn(200)
      end
    end.join
    timing
  end

  def assert_waited_for_the_burn(timing, slack_ns: 0)
    assert_predicate timing, :loop_wait_known?
    # It was ready for the whole burn: 200 ms of CPU clock, at least that long on the wall.
    assert_operator timing.loop_wait_ns + timing.wait_ns, :>=, 200 * MS * 0.99 - slack_ns, timing.inspect
    assert_operator timing.loop_wait_ns, :<=, timing.duration_ns
    assert_operator timing.idle_ns, :<, 100 * MS, "only the wait before it was ready is idle"
    assert_equal timing.duration_ns, timing.run_ns + timing.wait_ns + timing.idle_ns + timing.gc_ns +
                                     timing.loop_wait_ns - timing.pickup_wait_ns
    assert_match(/loop-wait;dur=#{format('%.3f', timing.loop_wait_ns / 1e6).sub(/\.?0+\z/, '')},/, timing.server_timing)
  end

  # Readiness the scheduler's waits tell (Native::LoopWaits, prepended to the scheduler's class):
  # a sleep's end, a socket's bytes (the kernel's time, a jiffy coarse: a lower bound), an unblock.
  def test_a_request_waits_for_its_loop_after_its_sleep
    timing = request_ready_beside_a_burn(-> { sleep 0.001 }, -> {})
    assert_waited_for_the_burn(timing, slack_ns: 1 * MS) # ready 1 ms into the burn
  end

  # async's sleep is a block with a timeout: the wait inside the wait counts once.
  class SleepByBlockScheduler < TinyScheduler
    def kernel_sleep(duration = nil) = block(nil, duration)
  end

  def test_a_wait_inside_a_wait_counts_once
    timing = request_ready_beside_a_burn(-> { sleep 0.001 }, -> {}, scheduler: SleepByBlockScheduler)
    assert_waited_for_the_burn(timing, slack_ns: 1 * MS)
  end

  def test_a_request_waits_for_its_loop_after_its_sockets_bytes
    timing = request_ready_beside_a_burn(-> { @connection.read(1) }, -> { @client.write("x") })
    assert_waited_for_the_burn(timing, slack_ns: JIFFY_NS)
  end

  def test_a_request_waits_for_its_loop_after_its_unblock
    queue = Thread::Queue.new
    timing = request_ready_beside_a_burn(-> { queue.pop }, -> { queue.push(1) })
    assert_waited_for_the_burn(timing)
  end

  # A wait whose readiness is not told (a pipe): its time stays idle, none is taken for the loop's.
  def test_a_request_whose_readiness_is_not_known_counts_it_idle
    reader, writer = IO.pipe
    timing = request_ready_beside_a_burn(-> { reader.read(1) }, -> { writer.write("x") })
    refute_predicate timing, :loop_wait_known?
    assert_operator timing.idle_ns, :>=, 200 * MS * 0.99
  ensure
    [reader, writer].each { |io| io&.close }
  end

  def test_a_request_on_a_thread_without_a_loop_has_no_loop_wait
    app = GVLScope::Rack.new(->(_env) { [200, {}, ["ok"]] }, route: false)
    env = env_for(@connection)
    response = app.call(env)
    refute_predicate env["gvlscope"], :loop_wait_known?
    assert_equal 0, env["gvlscope"].loop_wait_ns
    refute_match(/loop/, response[1]["server-timing"])
    refute_predicate GVLScope::Native, :loop_tracking?
    refute_match(/event_loop/, GVLScope::Metrics::Snapshot.from_native(GVLScope::Native.metrics_snapshot).to_prometheus)
  end

  # Outside an Async server's process (Falcon) a request does not look for a loop: Puma's, a
  # plain Rack server's requests pay one load for it.
  def test_a_request_looks_for_its_loop_only_where_requests_may_run_on_one
    GVLScope::Native.loop_requests = false
    seen = serve_beside_a_cpu_task(20)
    refute_predicate seen.fetch(:timing), :loop_wait_known?
    refute_predicate GVLScope::Native, :loop_tracking?
  end

  # An Enumerator's fiber inside a task switches fibers too: not a turn of the loop.
  def test_an_enumerators_fiber_in_a_task_is_not_a_turn
    before = GVLScope::EventLoops.turns
    Thread.new do
      Fiber.set_scheduler(TinyScheduler.new)
      GVLScope::EventLoops.track
      Fiber.schedule do
        numbers = [1, 2, 3].each
        3.times { numbers.next }
        sleep 0.001
      end
    end.join
    assert_equal 2, (GVLScope::EventLoops.turns - before).turns # the task's start until its sleep, then from its wake to its end
  end

  # A job runner on a loop (async): a worker task pops its job from a socket (a Redis BRPOP reply,
  # here written by another task that then keeps the thread), and EventLoops.measure_job measures
  # it from the bytes' arrival on that socket, as a Falcon request from its connection's; its
  # numbers go to the job series, as GVLScope::Sidekiq's.
  def test_a_job_that_came_over_a_socket_waits_for_the_loop_and_is_counted_as_a_job
    GVLScope::Native.loop_requests = false # a job runner's process: no Rack, nothing turned on beforehand
    GVLScope::Breakdown.reset!
    tags = { queue: "async" }.freeze
    seen = {}
    Thread.new do
      Fiber.set_scheduler(TinyScheduler.new)
      Fiber.schedule do # the first job on a task turns tracking on (its own turn is not known)
        seen[:first] = GVLScope::EventLoops.measure_job(@connection, "QuickJob", tags) { nil }
        @connection.wait_readable
        @connection.read_nonblock(64)
        enqueued_at = (Process.clock_gettime(Process::CLOCK_REALTIME) * 1000).floor - 1000
        seen[:timing] = GVLScope::EventLoops.measure_job(@connection, "QuickJob", tags, enqueued_at: enqueued_at) do |timing|
          seen[:job_ns] = now_ns
          seen[:inside] = timing
        end
      end
      Fiber.schedule do
        @client.write("*2\r\n$11\r\nqueue:async\r\n$2\r\n{}\r\n")
        seen[:written_ns] = now_ns
        burn(200)
        seen[:burnt_ns] = now_ns
      end
    end.join
    refute_predicate seen.fetch(:first), :loop_wait_known?
    timing = seen.fetch(:timing)
    assert_same timing, seen[:inside]
    assert_predicate timing, :finished?
    assert_predicate timing, :loop_wait_known?
    waited = timing.loop_wait_ns + timing.pickup_wait_ns
    assert_operator waited, :>=, seen[:burnt_ns] - seen[:written_ns] - 2 * JIFFY_NS, timing.inspect
    # The bytes' arrival is the kernel's TCP clock, a jiffy coarse either way (ext/gvlscope/handoff.c):
    # read a jiffy early, it puts the start of the wait before the write (3.4.5, a loaded full run: 0.33 ms).
    assert_operator timing.loop_wait_ns, :<=, seen[:job_ns] - seen[:written_ns] + JIFFY_NS, timing.inspect
    assert_operator timing.loop_wait_ns, :>=, 150 * MS, "200 ms of CPU: the wall time is at least that"
    assert_operator timing.queue_latency_ms, :>=, 1000 # the enqueued_at given, a second back
    assert_equal timing.loop_wait_ms.round(3), timing.to_h.fetch(:loop_wait_ms)
    assert_match(/; [\d.]+ ms waiting for its event loop \(other fibers ran\)\z/, timing.before_start_words("job"))
    entry = GVLScope::Breakdown.snapshot.find { |e| e.kind == :job && e.label == "QuickJob" }
    assert_equal [2, tags, timing.loop_wait_ns], [entry.count, entry.tags, entry.loop_wait_ns]
    assert_operator entry.queue_latency_ns, :>=, timing.queue_latency_ns
  ensure
    GVLScope::Breakdown.reset!
  end

  # A job that raises is measured and counted, and its exception is the job's, untouched; off a
  # loop's task a job has no loop wait; what is not an IO, or metrics left off, is said in one line.
  def test_measure_job_passes_a_jobs_exception_through_and_needs_an_io
    GVLScope::Breakdown.reset!
    GVLScope::Metrics.disable
    ran = false
    error = assert_raises(GVLScope::Error) { GVLScope::EventLoops.measure_job(@connection, "EarlyJob") { ran = true } }
    assert_equal "GVLScope::EventLoops.measure_job: metrics are off (GVLScope::Metrics.enable at the runner's boot)", error.message
    refute ran
    GVLScope::Metrics.enable
    error = assert_raises(KeyError) { GVLScope::EventLoops.measure_job(@connection, "FailingJob") { {}.fetch(:x) } }
    assert_equal "key not found: :x", error.message
    entry = GVLScope::Breakdown.snapshot.find { |e| e.label == "FailingJob" }
    assert_equal [:job, 1, 0], [entry.kind, entry.count, entry.loop_wait_ns]
    refute_predicate GVLScope::EventLoops.measure_job(@connection, "PlainJob") { nil }, :loop_wait_known?
    error = assert_raises(TypeError) { GVLScope::RequestTiming.start_on_loop(@connection.fileno) }
    assert_equal "GVLScope::RequestTiming.start_on_loop: expected the IO the work came on, got Integer", error.message
  ensure
    GVLScope::Breakdown.reset!
  end
end
