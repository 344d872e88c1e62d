# frozen_string_literal: true

require "test_helper"
require "open3"
require "socket"
require "tmpdir"
require "gvlscope/rack"
require "gvlscope/integrations/handoffs"

# Hand-offs (ext/gvlscope/handoff.c): a request's pickup wait covers the GVL wait of every thread
# the work went through since it arrived, across the locks taken on the way. Checked against the
# trace of the same run: the trace and the metrics read the same hook events, so the request's
# wait must be exactly the waits the trace shows on its way.
class HandoffTest < Minitest::Test
  include GVLScopeTestHelper

  # Puma's shape: the thread that readied a connection (the server thread, the reactor) hands it to
  # the pool with ThreadPool#<<, which pushes it on the pool's todo list (Handoffs gives the pool a
  # stamping one before its first thread starts); a pool thread takes it and serves it.
  class FakeClient # Puma::Client keeps its connection in @io
    attr_reader :io

    def initialize(io) = @io = io
  end

  # GVLScope::Rack finds a request's stamp by env["puma.socket"], as Puma sets it.
  class FakePool
    prepend GVLScope::Handoffs::PumaThreadPool

    APP = GVLScope::Rack.new(->(env) { [200, {}, [env["gvlscope"]]] }, route: false)

    def initialize
      @todo = Queue.new
      @spawned = 0
      spawn_thread
    end

    def <<(client) = @todo << client
    def pop = @todo.pop
    private def spawn_thread = @spawned += 1
    def serve(client) = APP.call({ "REQUEST_METHOD" => "GET", "PATH_INFO" => "/", "puma.socket" => client.io })[2][0]
  end

  def setup
    GVLScope::Native.handoff_claim_in_rack = true # as Handoffs.install_puma does under Puma
    GVLScope::Metrics.enable
    @dir = Dir.mktmpdir("gvlscope-handoff")
  end

  def teardown
    GVLScope.stop if GVLScope.tracing?
    GVLScope::Metrics.disable
    FileUtils.rm_rf(@dir)
  end

  # Beside a thread that never gives up the GVL but at its timeslice's end: the server thread
  # wakes from IO.select (the connection arrives), waits for the GVL, accepts and hands over; the
  # pool thread wakes from its queue, waits, blocks on a lock another thread holds, waits again,
  # and starts the request. The old rule counted the wait since the last wake only (after the
  # lock); the request's wait is all of the path's waits.
  def test_the_pickup_wait_is_every_wait_on_the_way_from_the_arrival
    server = FakePool.new
    wake_r, wake_w = IO.pipe
    conn, other = UNIXSocket.pair
    lock = Mutex.new
    at_lock = false
    stop = false
    path = File.join(@dir, "handoff.gvl")
    GVLScope.start(path, stacks: false)

    hog = Thread.new { x = 0; x += 1 until stop } # rubocop:disable Style/Semicolon
    acceptor = Thread.new do
      IO.select([wake_r])
      wake_r.read_nonblock(1)
      server << FakeClient.new(conn)
    end
    acceptor.name = "acceptor"
    holder = Thread.new do
      lock.synchronize do
        Thread.pass until at_lock
        sleep 0.005 # the pool thread is blocked on the lock by now
      end
    end
    pool = Thread.new do
      client = server.pop
      at_lock = true
      lock.synchronize { nil }
      server.serve(client)
    end
    pool.name = "pool"
    sleep 0.05 until [acceptor, pool].all? { |t| t.status == "sleep" }
    # The connection arrives while the server thread waits for it: that wait is its longest block
    # (the nonblocking read after it releases the GVL too, for microseconds).
    sleep 0.02
    wake_w.write("x")
    timing = pool.value
    holder.join
    stop = true
    hog.join
    GVLScope.stop

    # The acceptor's waits after IO.select returned; the pool thread's after its queue woke it.
    after_select, after_pop = after_first_block(path, "acceptor", "pool")
    expected = (after_select + after_pop).select { |i| i.state == :wait }.sum(&:duration_ns)
    lock_idles = after_pop.count { |i| i.state == :idle }
    assert_operator lock_idles, :>=, 1, "the pool thread blocked on the lock: #{after_pop.map(&:state)}"
    assert_operator expected, :>, 0
    # Both come from the same events; the trace keeps times to the microsecond.
    assert_in_delta expected, timing.wait_ns, 2_000 * (after_select.size + after_pop.size), "trace's waits vs the request's"
    assert_operator timing.pickup_wait_ns, :<=, timing.queue_ns
    assert timing.pickup_exact?
    # The pool thread slept in its queue at the hand-off: from then until it woke (its first wait
    # after the pop's block) it was being woken and given a core; the hand-off came after the
    # acceptor's wake, so that part is shorter than the pool thread's wake after the acceptor's.
    refute_nil timing.queue_cpu_ns
    assert_operator timing.queue_cpu_ns, :>, 0
    assert_operator timing.queue_cpu_ns, :<=, after_pop.first.start_ns - after_select.first.start_ns + 2_000
    assert_match(/queue-cpu;dur=/, timing.server_timing) if timing.queue_ns >= 1_000_000
  ensure
    stop = true
    [wake_r, wake_w, conn, other].each { |io| io&.close unless io&.closed? }
  end

  # Threads beside the hog wake for things that are not this request (a wakeup pipe: Puma's reactor
  # when a connection is added, or a lost accept in cluster mode), each time wait for the GVL and
  # go back to select; then the request's bytes arrive on a TCP connection. Only the waits after
  # the wake its bytes caused are its own. (The old rule took the longest block since the last
  # hand-off, the first, and charged every wait since.)
  def test_wakes_for_other_work_are_not_charged_to_the_request
    server = FakePool.new
    listener = TCPServer.new("127.0.0.1", 0)
    client = TCPSocket.new("127.0.0.1", listener.addr[1])
    conn = listener.accept
    wake_r, wake_w = IO.pipe
    lost = Queue.new
    stop = false
    path = File.join(@dir, "lost.gvl")
    GVLScope.start(path, stacks: false)
    hog = Thread.new { x = 0; x += 1 until stop } # rubocop:disable Style/Semicolon
    reactor = Thread.new do
      loop do
        ready, = IO.select([wake_r, conn])
        next lost << wake_r.read_nonblock(1) unless ready.include?(conn)

        conn.read_nonblock(100)
        break server << FakeClient.new(conn)
      end
    end
    reactor.name = "reactor"
    pool = Thread.new { server.serve(server.pop) }
    pool.name = "pool"
    sleep 0.05 until [reactor, pool].all? { |t| t.status == "sleep" }
    sleep 0.3 # the reactor's first block is its longest
    3.times do
      wake_w.write("x")
      lost.pop
      sleep 0.001 until reactor.status == "sleep"
    end
    sleep 0.02
    sent_at = Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond)
    client.write("GET / HTTP/1.1\r\n\r\n")
    timing = pool.value
    since_sent = Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond) - sent_at
    stop = true
    hog.join
    GVLScope.stop

    # The reactor's waits after the block the bytes ended (its last block of 10 ms or more), the
    # pool thread's after its queue woke it.
    reactor_intervals, pool_intervals = after_first_block(path, "reactor", "pool")
    last_select = reactor_intervals.rindex { |i| i.state == :idle && i.duration_ns >= 10_000_000 }
    after_data = reactor_intervals.drop(last_select + 1)
    lost_waits = reactor_intervals.take(last_select).select { |i| i.state == :wait }.sum(&:duration_ns)
    assert_operator lost_waits, :>, 100_000_000, "the lost wakes waited beside the hog: #{reactor_intervals.map(&:state)}"
    expected = (after_data + pool_intervals).select { |i| i.state == :wait }.sum(&:duration_ns)
    assert_in_delta expected, timing.wait_ns, 2_000 * (after_data.size + pool_intervals.size), "trace's waits vs the request's"
    # Physical bounds: charged only from when its bytes arrived.
    assert_operator timing.queue_ns, :<=, since_sent
    assert_operator timing.pickup_wait_ns, :<=, timing.queue_ns
    assert timing.pickup_exact?
  ensure
    stop = true
    [wake_r, wake_w, client, conn, listener].each { |io| io&.close unless io&.closed? }
  end

  # A connection accepted and handed over, silent at first: the pool thread finds no request and
  # gives it to the reactor, which hands it over again when its bytes come. The request is charged
  # from then, never for its silence, nor for the waits of other requests meanwhile.
  def test_a_silent_connection_is_charged_from_its_bytes
    server = FakePool.new
    listener = TCPServer.new("127.0.0.1", 0)
    client = TCPSocket.new("127.0.0.1", listener.addr[1])
    stop = false
    hog = Thread.new { x = 0; x += 1 until stop } # rubocop:disable Style/Semicolon
    acceptor = Thread.new do
      IO.select([listener])
      server << FakeClient.new(listener.accept_nonblock)
    end
    silent = Queue.new
    first = Thread.new do
      client_conn = server.pop
      ready, = IO.select([client_conn.io], nil, nil, 0)
      silent << client_conn unless ready # no request yet: to the reactor
    end
    reactor = Thread.new do
      handed = silent.pop
      IO.select([handed.io])
      handed.io.read_nonblock(100)
      server << handed
    end
    pool = Thread.new { server.serve(server.pop) }
    [acceptor, first].each(&:join)
    sleep 0.5 # silent; the hog and the threads' waits go on
    sent_at = Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond)
    client.write("GET / HTTP/1.1\r\n\r\n")
    timing = pool.value
    since_sent = Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond) - sent_at
    reactor.join
    assert_operator timing.queue_ns, :<=, since_sent
    assert_operator timing.wait_ns, :<=, since_sent
    assert_operator timing.pickup_wait_ns, :<=, timing.queue_ns
  ensure
    stop = true
    hog&.join
    [client, listener].each { |io| io&.close unless io&.closed? }
  end

  # One pool thread, busy with a request beside the hog when the next connection is handed over:
  # the second request waited for a free thread (queue_thread_ns), and the GVL waits of the first
  # request, counted there, are not counted again in the second's pickup.
  def test_a_request_handed_to_a_busy_thread_waits_for_it_and_is_not_charged_its_waits
    server = FakePool.new
    listener = TCPServer.new("127.0.0.1", 0)
    clients = []
    stop = false
    handed_second = false
    # CPU beside the hog (it waits) until the second connection is handed over, and 0.2 s more.
    slow_app = GVLScope::Rack.new(lambda { |env|
      deadline = nil
      until deadline && Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
        deadline ||= Process.clock_gettime(Process::CLOCK_MONOTONIC) + 0.2 if handed_second
      end
      [200, {}, [env["gvlscope"]]]
    }, route: false)
    hog = Thread.new { x = 0; x += 1 until stop } # rubocop:disable Style/Semicolon
    acceptor = Thread.new do
      2.times do
        IO.select([listener])
        server << FakeClient.new(listener.accept_nonblock)
      end
      handed_second = true
    end
    pool = Thread.new do
      first = server.pop
      one = slow_app.call({ "REQUEST_METHOD" => "GET", "PATH_INFO" => "/", "puma.socket" => first.io })[2][0]
      [one, server.serve(server.pop)]
    end
    clients << TCPSocket.new("127.0.0.1", listener.addr[1])
    clients[0].write("GET / HTTP/1.1\r\n\r\n")
    clients << TCPSocket.new("127.0.0.1", listener.addr[1])
    clients[1].write("GET / HTTP/1.1\r\n\r\n")
    one, two = pool.value
    acceptor.join
    refute_nil two.queue_thread_ns
    assert_operator two.queue_thread_ns, :>, 0, "handed over while the only thread ran the first request"
    assert_operator two.queue_thread_ns, :<=, two.queue_ns
    # The first request waited beside the hog; the second's pickup is only what came after it.
    assert_operator one.wait_ns, :>, 100_000_000
    assert_operator two.pickup_wait_ns + two.queue_thread_ns, :<=, two.queue_ns
    assert_match(/queue-threads;dur=/, two.server_timing)
    assert_equal 0, two.queue_cpu_ns, "busy at the hand-off: it never slept, so no wake to wait for"
  ensure
    stop = true
    hog&.join
    [*clients, listener].each { |io| io&.close unless io&.closed? }
  end

  # Puma 8's shape for a kept-alive connection whose next request's bytes are there after the
  # response (Server#process_client): the same thread serves it, with no hand-off to claim. After
  # the first request the thread releases the GVL (the response's write) and waits for it behind
  # two hogs (~200 ms); the client's next bytes come during that wait. Only the wait since they
  # came is the second request's: its pickup ends before the request does, and the bytes were
  # written at least 50 ms (a sleep never ends early) after the writer was spawned.
  def test_a_kept_alive_requests_pickup_counts_from_its_bytes_not_from_the_threads_wake
    runs = Array.new(3) { kept_alive_request_after_a_wait }.compact
    refute_empty runs, "the bytes came after the thread's wait every time (a loaded machine): nothing checked"
    runs.each do |two, spawned_ns, ended_ns|
      assert_nil two.queue_ns, "no hand-off"
      assert_operator two.pickup_wait_ns, :<=, ended_ns - spawned_ns - 50_000_000
    end
  end

  # [timing, writer spawned (ns), request ended (ns)], or nil when the bytes came after the wait.
  def kept_alive_request_after_a_wait
    listener = TCPServer.new("127.0.0.1", 0)
    client = TCPSocket.new("127.0.0.1", listener.addr[1])
    connection = listener.accept
    env = -> { { "REQUEST_METHOD" => "GET", "PATH_INFO" => "/", "puma.socket" => connection } }
    stop = false
    hogs = nil
    Thread.new do
      FakePool::APP.call(env.call)
      hogs = Array.new(2) { Thread.new { x = 0; x += 1 until stop } } # rubocop:disable Style/Semicolon
      spawned_ns = Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond)
      writer = Process.spawn("sleep 0.05; printf 'GET / HTTP/1.1\\r\\n\\r\\n' >&3", 3 => client)
      sleep 0.001 # released, woken, then waits behind both hogs
      # Read without releasing the GVL, as Puma's eagerly_finish does.
      ready = connection.recv_nonblock(1, Socket::MSG_PEEK, exception: false) != :wait_readable
      two = FakePool::APP.call(env.call)[2][0] if ready
      ended_ns = Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond)
      stop = true
      Process.wait(writer)
      [two, spawned_ns, ended_ns] if ready
    end.value
  ensure
    stop = true
    hogs&.each(&:join)
    [client, connection, listener].each { |io| io&.close unless io&.closed? }
  end

  # Sidekiq's shape: the processor fetches its job (a blocking pop, as BRPOP), then takes the job
  # logger's lock, which another thread holds, before the middleware starts the job's timing.
  class FakeProcessor
    prepend GVLScope::Handoffs::SidekiqProcessor

    def initialize(jobs) = @jobs = jobs
    def run(lock, reached)
      fetch
      reached << true
      lock.synchronize { GVLScope::RequestTiming.start.finish! }
    end

    private

    def fetch = @jobs.pop
  end

  def test_a_jobs_pickup_wait_counts_from_the_fetch_that_brought_it
    jobs = Queue.new
    lock = Mutex.new
    reached = Queue.new
    stop = false
    path = File.join(@dir, "fetch.gvl")
    GVLScope.start(path, stacks: false)
    hog = Thread.new { x = 0; x += 1 until stop } # rubocop:disable Style/Semicolon
    processor = FakeProcessor.new(jobs)
    worker = Thread.new { processor.run(lock, reached) }
    worker.name = "processor"
    holder = Thread.new do
      lock.synchronize do
        Thread.pass until !reached.empty? && worker.status == "sleep"
        sleep 0.005 # the processor is blocked on the lock by now
      end
    end
    sleep 0.05 until worker.status == "sleep" && holder.status == "run"
    sleep 0.02 # the processor waits for its job: its longest block
    jobs << { "class" => "QuickJob" }
    timing = worker.value
    holder.join
    stop = true
    hog.join
    GVLScope.stop

    after_pop, = after_first_block(path, "processor")
    # Its waits for the GVL, and its time blocked on the lock on the way, which counts too (kept apart).
    waits, blocked = %i[wait idle].map { |state| after_pop.select { |i| i.state == state }.sum(&:duration_ns) }
    assert_operator blocked, :>, 0, "the processor blocked on the lock: #{after_pop.map(&:state)}"
    assert_operator waits, :>, 0
    assert_in_delta waits + blocked, timing.wait_ns, 2_000 * after_pop.size, "trace's waits and block vs the job's"
    assert_in_delta blocked, timing.blocked_before_start_ns, 2_000 * after_pop.size
    assert_operator timing.queue_ns, :>=, timing.pickup_wait_ns
  ensure
    stop = true
  end

  # Each named thread's intervals in the trace after its first block (the wait for work) ended.
  def after_first_block(path, *names)
    timeline = GVLScope::Model.timeline(path)
    names.map do |name|
      thread = timeline.threads.values.find { |t| t.label.start_with?(name) } or flunk "no #{name} in #{timeline.threads.values.map(&:label)}"
      thread.intervals.drop_while { |i| i.state != :idle }.drop_while { |i| i.state == :idle }
    end
  end

  # A Puma without ThreadPool#spawn_thread (none of 6-8; a future one may change it): one line at
  # boot says the numbers leave the wait before the app out, and nothing is prepended.
  def test_a_puma_without_the_hand_off_method_says_so_once_at_boot
    program = <<~'RUBY'
      module Puma
        class Server; end
        module Const; PUMA_VERSION = "9.0.0"; end
        class ThreadPool; def push(work) = work; end
      end
      require "gvlscope/rack"
      2.times { GVLScope::Rack.new(->(_env) { [200, {}, []] }) }
      print Puma::ThreadPool.ancestors.first == Puma::ThreadPool
    RUBY
    assert_equal ["true", "gvlscope: Puma 9.0.0 has no ThreadPool#spawn_thread: #{IN_APP_ONLY}"], run_beside_puma(program)
  end

  IN_APP_ONLY = "gvl-wait counts only the wait inside the app, not the wait before it (no queue entry; docs/web.md)"

  # A program defining its own Puma, run: what it printed, and its one line of errors.
  def run_beside_puma(program)
    out, err, status = Open3.capture3({ "RUBYOPT" => nil }, RbConfig.ruby, "-I", File.join(ROOT, "lib"), "-e", program)
    assert status.success?, err
    assert_equal 1, err.lines.size, err
    [out, err.chomp]
  end

  # A pool whose todo list is neither of the kinds Puma 6-8 use: said once, when its first thread
  # starts; the list is left as it is.
  def test_a_pool_with_another_todo_list_says_so_once
    program = <<~'RUBY'
      module Puma
        class Server; end
        module Const; PUMA_VERSION = "9.1.0"; end
        class ThreadPool
          attr_reader :todo
          def initialize = (@todo = Hash.new) && (@spawned = 0) && 2.times { spawn_thread }
          private def spawn_thread = @spawned += 1
        end
      end
      require "gvlscope/rack"
      GVLScope::Rack.new(->(_env) { [200, {}, []] })
      2.times { print Puma::ThreadPool.new.todo.class }
    RUBY
    assert_equal ["HashHash", "gvlscope: Puma 9.1.0 keeps its todo list in a Hash: #{IN_APP_ONLY}"], run_beside_puma(program)
  end

  # Puma 6 keeps its todo list in an Array, 7 and 8 in a Thread::Queue; a pool with a minimum of 0
  # threads spawns its first at its first request, pushed already: it is kept, and every later
  # push is stamped.
  def test_each_kind_of_todo_list_is_given_a_stamping_one_keeping_what_it_holds
    [[[], GVLScope::Native::StampingArray], [Queue.new, GVLScope::Native::StampingQueue]].each do |list, stamping|
      pool = Class.new do
        prepend GVLScope::Handoffs::PumaThreadPool
        attr_reader :todo

        def initialize(list) = (@todo = list) && (@spawned = 0)
        def <<(work) = (@todo << work) && spawn_thread
        private def spawn_thread = @spawned += 1
      end.new(list)
      pool << :first
      pool << :second
      assert_instance_of stamping, pool.todo
      assert_equal %i[first second], [pool.todo.shift, pool.todo.shift]
    end
  end

  def test_work_without_a_hand_off_keeps_the_threads_own_rule
    timing = Thread.new { GVLScope::RequestTiming.start.finish! }.value
    assert_nil timing.queue_ns
    assert timing.pickup_exact?
    refute_match(/queue/, timing.server_timing)
  end

  # A stamp for another descriptor, or none, is no hand-off: a pool thread given a connection that
  # nobody stamped (an SSL socket, a test double) counts as before.
  def test_a_client_without_a_stamp_is_no_hand_off
    server = FakePool.new
    timing = Thread.new { server.serve(FakeClient.new(Object.new)) }.value
    assert_nil timing.queue_ns
  end
end
