# frozen_string_literal: true

require "test_helper"
require "socket"
require "gvlscope/live"

# `advise/top --url` read a page they do not control: numbers no Float holds, bucket bounds of no
# bucket, a page of a GiB, a page trickled forever. Each ends in one GVLScope::Error line.
class ScrapeTest < Minitest::Test
  Scrape = GVLScope::Live::Scrape

  PAGE = <<~TEXT
    gvlscope_wall_seconds_total{worker="0",pid="11"} 10.0
    gvlscope_gvl_held_seconds_total{worker="0",pid="11"} 4.0
    gvlscope_gvl_wait_seconds_total{worker="0",pid="11"} 1.5
    gvlscope_gvl_hold_seconds_bucket{worker="0",pid="11",le="1.6384e-05"} 3
    gvlscope_gvl_hold_seconds_bucket{worker="0",pid="11",le="+Inf"} 3
  TEXT

  def parse(text) = Scrape.parse(text, time_ns: 1)

  def test_a_page_reads
    snapshot = parse(PAGE)
    assert_equal [10_000_000_000, 4_000_000_000, 1_500_000_000], [snapshot.wall_ns, snapshot.held_ns, snapshot.wait_ns]
    assert_equal 3, snapshot.hold_histogram[14]
  end

  # Issue 28: FloatDomainError and NoMethodError ("internal error") on each of these.
  def test_numbers_no_count_holds_are_one_line
    %w[1e300 1e400 -1e400 -1 1e19].each do |value|
      error = assert_raises(GVLScope::Error, value) { parse(PAGE.sub("} 4.0", "} #{value}")) }
      assert_equal "gvlscope_gvl_held_seconds_total is #{value.inspect} in the answer: not a count gvlscope writes", error.message
    end
  end

  # A bound of no bucket of ours (far above, far below) is left out; the rest of the page reads.
  def test_bucket_bounds_of_no_bucket_are_left_out
    %w[1e400 1e-300 1e300 NaN].each do |bound|
      snapshot = parse(PAGE.sub('le="1.6384e-05"', %(le="#{bound}")))
      assert_equal 0, snapshot.hold_histogram.sum, bound
    end
  end

  # One connection at a time: each is answered by the block (given the client's socket).
  def serve(answer)
    server = TCPServer.new("127.0.0.1", 0)
    thread = Thread.new do
      loop do
        client = server.accept
        client.readpartial(4096)
        answer.call(client)
      rescue IOError, SystemCallError
        nil
      ensure
        client&.close
      end
    end
    yield "http://127.0.0.1:#{server.addr[1]}/metrics"
  ensure
    thread&.kill&.join
    server&.close
  end

  # Issue 28: a 1 GiB page took 1.1 GB. Past 16 MB the read stops.
  def test_a_page_over_the_cap_is_refused
    answer = lambda do |client|
      client.write("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n")
      chunk = "# filler\n" * 100_000
      ((Scrape::MAX_BODY_BYTES / chunk.bytesize) + 2).times { client.write(chunk) }
    end
    serve(answer) do |url|
      error = assert_raises(GVLScope::Error) { Scrape.new(url).snapshot }
      assert_equal "#{url}: the answer is over 16 MB (is it the Puma plugin's /metrics?)", error.message
    end
  end

  # Issue 28: a page trickled a byte at a time (each read well within its 3 s) ran past 90 s.
  # The deadline covers the whole answer (1 s here, 10 s by default).
  def test_a_trickled_page_ends_at_the_deadline
    answer = lambda do |client|
      client.write("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n")
      loop do
        client.write("#")
        sleep 0.05
      end
    end
    serve(answer) do |url|
      started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      error = assert_raises(GVLScope::Error) { Scrape.new(url, deadline: 1).snapshot }
      assert_equal "cannot read #{url}: no whole answer in 1 s", error.message
      # Not a tight bound: only that it ended (it never did before).
      assert_operator Process.clock_gettime(Process::CLOCK_MONOTONIC) - started, :<, 30
    end
  end
end
