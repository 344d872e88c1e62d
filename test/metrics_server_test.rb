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

  # Past MAX_CLIENTS a connection is closed at once; once the deadline passed, the slots are free.
  def test_more_stalled_clients_than_the_server_serves_at_once
    stalled = Array.new(GVLScope::MetricsServer::MAX_CLIENTS) { TCPSocket.new("127.0.0.1", @server.port) }
    sleep 0.2 # all accepted, in order
    extra = TCPSocket.new("127.0.0.1", @server.port)
    assert IO.select([extra], nil, nil, 0.5), "the connection past the limit is closed at once"
    assert_equal "", read_all(extra)
    assert_nil IO.select(stalled, nil, nil, 0), "the others are still being waited for"
    sleep GVLScope::MetricsServer::REQUEST_DEADLINE + 0.2
    assert_equal "200", scrape.code
    assert_equal "404", scrape("/").code
  ensure
    [*stalled, extra].compact.each(&:close)
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
