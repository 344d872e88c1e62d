# frozen_string_literal: true

require "socket"
require "zlib"

# A stand-in for an APM's agent or intake (Datadog's trace agent, Sentry's and Honeybadger's
# endpoints; OTLPReceiver's HTTP): a TCPServer on a free loopback port that answers every request
# with 200 and a body of its own (+answer+, of +content_type+), and keeps each request, its body
# uncompressed when it came gzipped or deflated.
class HTTPCollector
  Request = Struct.new(:method, :path, :headers, :body)

  attr_reader :port

  def initialize(answer: "{}", content_type: "application/json")
    @answer = answer
    @content_type = content_type
    @server = TCPServer.new("127.0.0.1", 0)
    @port = @server.addr[1]
    @requests = Queue.new
    @thread = Thread.new { loop { Thread.new(@server.accept) { |client| serve(client) } } }
  end

  def url = "http://127.0.0.1:#{@port}"

  # The next request received, or nil after +timeout+ seconds (for a test that takes them one by
  # one; #received gathers them).
  def next_request(timeout: 10) = @requests.pop(timeout: timeout)

  # The requests received so far whose path starts with +prefix+.
  def received(prefix = "/")
    @received ||= []
    @received << @requests.pop until @requests.empty?
    @received.select { |request| request.path.start_with?(prefix) }
  end

  def close
    @thread.kill
    @server.close
  end

  private

  # HTTP/1.1 with keep-alive, as Net::HTTP sends it: request line, headers, a Content-Length or
  # chunked body.
  def serve(client)
    loop do
      request_line = client.gets or break
      headers = {}
      while (line = client.gets) && line != "\r\n"
        name, value = line.split(":", 2)
        headers[name.downcase] = value.strip
      end
      body = headers["transfer-encoding"] == "chunked" ? read_chunked(client) : client.read(Integer(headers.fetch("content-length", "0")))
      body = Zlib.gunzip(body) if headers["content-encoding"] == "gzip"
      body = Zlib::Inflate.inflate(body) if headers["content-encoding"] == "deflate"
      method, path = request_line.split
      @requests << Request.new(method, path, headers, body)
      client.write("HTTP/1.1 200 OK\r\nContent-Type: #{@content_type}\r\nContent-Length: #{@answer.bytesize}\r\n\r\n#{@answer}")
    end
  rescue IOError, SystemCallError
    nil
  ensure
    client.close
  end

  def read_chunked(client)
    body = +""
    while (size = Integer(client.gets.to_s.strip, 16)).positive?
      body << client.read(size)
      client.gets
    end
    client.gets
    body
  end
end
