# frozen_string_literal: true

require "test_helper"
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

  # Puma's shape (Server#new_client on the server thread, #process_client on a pool thread), the
  # methods Handoffs prepends to.
  FakeClient = Struct.new(:io)

  # GVLScope::Rack finds a request's stamp by env["puma.socket"], as Puma sets it.
  class FakeServer
    prepend GVLScope::Handoffs::PumaServer

    APP = GVLScope::Rack.new(->(env) { [200, {}, [env["gvlscope"]]] }, route: false)

    def new_client(io, _listener) = FakeClient.new(io)
    def reactor_wakeup(client) = client
    def process_client(client) = APP.call({ "REQUEST_METHOD" => "GET", "PATH_INFO" => "/", "puma.socket" => client.io })[2][0]
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
    server = FakeServer.new
    wake_r, wake_w = IO.pipe
    conn, other = UNIXSocket.pair
    handed = Queue.new
    lock = Mutex.new
    at_lock = false
    stop = false
    path = File.join(@dir, "handoff.gvl")
    GVLScope.start(path, stacks: false)

    hog = Thread.new { x = 0; x += 1 until stop } # rubocop:disable Style/Semicolon
    acceptor = Thread.new do
      IO.select([wake_r])
      wake_r.read_nonblock(1)
      handed << server.new_client(conn, nil)
    end
    acceptor.name = "acceptor"
    holder = Thread.new do
      lock.synchronize do
        Thread.pass until at_lock
        sleep 0.005 # the pool thread is blocked on the lock by now
      end
    end
    pool = Thread.new do
      client = handed.pop
      at_lock = true
      lock.synchronize { nil }
      server.process_client(client)
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
  ensure
    stop = true
    [wake_r, wake_w, conn, other].each { |io| io&.close unless io&.closed? }
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

  def test_work_without_a_hand_off_keeps_the_threads_own_rule
    timing = Thread.new { GVLScope::RequestTiming.start.finish! }.value
    assert_nil timing.queue_ns
    assert timing.pickup_exact?
    refute_match(/queue/, timing.server_timing)
  end

  # A stamp for another descriptor, or none, is no hand-off: a pool thread given a connection that
  # nobody stamped (an SSL socket, a test double) counts as before.
  def test_a_client_without_a_stamp_is_no_hand_off
    server = FakeServer.new
    timing = Thread.new { server.process_client(FakeClient.new(Object.new)) }.value
    assert_nil timing.queue_ns
  end
end
