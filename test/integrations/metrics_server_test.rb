# frozen_string_literal: true

require "test_helper"
require "net/http"
require "socket"

# The /metrics server faces whatever connects to its port: a client that sends half a request and
# stalls, or never sends anything, must not keep Prometheus from scraping.
class MetricsServerTest < Minitest::Test
  def setup
    @server = GVLScope::MetricsServer.new(host: "127.0.0.1", port: 0) { "gvlscope_up 1\n" }.start
  end

  def teardown
    @server.stop
  end

  def clock = Process.clock_gettime(Process::CLOCK_MONOTONIC)

  def scrape(path = "/metrics")
    Net::HTTP.start("127.0.0.1", @server.port, open_timeout: 5, read_timeout: 5) { |http| http.get(path) }
  end

  # What the server sent before closing ("" for nothing; a reset after unread input counts as closed).
  def read_all(socket)
    socket.read
  rescue Errno::ECONNRESET
    ""
  end

  def test_a_stalled_client_does_not_delay_a_scrape
    stalled = TCPSocket.new("127.0.0.1", @server.port)
    stalled.write("GET")
    silent = TCPSocket.new("127.0.0.1", @server.port)
    sleep 0.1 # both connections accepted and being served
    started = clock
    response = scrape
    took = clock - started
    assert_equal "200", response.code
    assert_equal "gvlscope_up 1\n", response.body
    assert_operator took, :<, 1.0, "a scrape took #{took.round(3)} s behind a stalled client"

    # Each stalled connection is closed once its request deadline passed, however it trickles.
    started = clock
    trickle = Thread.new { 20.times { stalled.write(" "); sleep 0.2 } rescue SystemCallError }
    assert_equal "", read_all(stalled), "the server closes the stalled connection without an answer"
    assert_equal "", read_all(silent)
    assert_operator clock - started, :<=, GVLScope::MetricsServer::REQUEST_DEADLINE + 0.5
    trickle.kill
  ensure
    [stalled, silent].each { |socket| socket&.close }
  end

  # Past MAX_CLIENTS a new connection closes the oldest one still sending its request: clients
  # that stall (and reconnect as soon as they are closed) never keep a scrape out. They used to:
  # the newest connection was the one closed, and 38 of 40 scrapes failed.
  def test_stalled_clients_do_not_keep_scrapes_out
    max = GVLScope::MetricsServer::MAX_CLIENTS
    stalled = Array.new(max) { TCPSocket.new("127.0.0.1", @server.port).tap { |s| s.write("GET") } }
    10.times do |i|
      response = scrape
      assert_equal "200", response.code, "scrape #{i}"
      assert_equal "gvlscope_up 1\n", response.body
      stalled << TCPSocket.new("127.0.0.1", @server.port).tap { |s| s.write("GET") } # the client reconnects
    end
    assert_equal "", read_all(stalled.first), "the oldest was closed unanswered to make room"
    assert_equal "404", scrape("/").code
  ensure
    stalled&.each(&:close)
  end

  # A failed accept (here EMFILE, the process out of descriptors, twice) used to end the accept
  # loop: no /metrics for the rest of the process. Now it pauses, and the waiting scrape is served.
  def test_a_failed_accept_pauses_and_serving_goes_on
    server = GVLScope::MetricsServer.new(host: "127.0.0.1", port: 0) { "gvlscope_up 1\n" }
    failures = 2
    listener = server.instance_variable_get(:@server)
    listener.singleton_class.prepend(Module.new do
      define_method(:accept) { (failures -= 1) >= 0 ? raise(Errno::EMFILE) : super() }
    end)
    server.start
    response = Net::HTTP.start("127.0.0.1", server.port, open_timeout: 5, read_timeout: 10) { |http| http.get("/metrics") }
    assert_equal "200", response.code
    assert_operator failures, :<, 0, "both failures happened before the scrape was answered"
  ensure
    server&.stop
  end

  def test_a_request_without_headers_end_is_answered_at_eof
    socket = TCPSocket.new("127.0.0.1", @server.port)
    socket.write("GET /metrics HTTP/1.0\r\n")
    socket.close_write
    assert_match(%r{\AHTTP/1.1 200 OK\r\n.*\r\n\r\ngvlscope_up 1\n\z}m, socket.read)
  ensure
    socket&.close
  end
end
