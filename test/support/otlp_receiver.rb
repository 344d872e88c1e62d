# frozen_string_literal: true

require "socket"
require "zlib"

# An OTLP/HTTP endpoint for the tests: a TCPServer on a free loopback port that answers each POST
# with 200 and keeps each request, its body gunzipped and decoded with the protobuf classes the
# OTLP exporter gems ship: an ExportMetricsServiceRequest (kind :metrics, POST /v1/metrics) or an
# ExportTraceServiceRequest (kind :traces, POST /v1/traces).
class OTLPReceiver
  Request = Struct.new(:path, :headers, :body, :decoded)

  attr_reader :port

  def initialize(kind = :metrics)
    @kind = kind
    if kind == :traces
      require "opentelemetry/proto/collector/trace/v1/trace_service_pb"
      @service = Opentelemetry::Proto::Collector::Trace::V1
      @request_class, @response_class = @service::ExportTraceServiceRequest, @service::ExportTraceServiceResponse
    else
      require "opentelemetry/proto/collector/metrics/v1/metrics_service_pb"
      @service = Opentelemetry::Proto::Collector::Metrics::V1
      @request_class, @response_class = @service::ExportMetricsServiceRequest, @service::ExportMetricsServiceResponse
    end
    @server = TCPServer.new("127.0.0.1", 0)
    @port = @server.addr[1]
    @requests = Queue.new
    @thread = Thread.new { loop { serve(@server.accept) } }
  end

  def endpoint = "http://127.0.0.1:#{@port}/v1/#{@kind}"

  # The next request received (decoded), or nil after +timeout+ seconds.
  def next_request(timeout: 10) = @requests.pop(timeout: timeout)

  def close
    @thread.kill
    @server.close
  end

  private

  # HTTP/1.1 with keep-alive, as Net::HTTP sends it: request line, headers, Content-Length body.
  def serve(client)
    loop do
      request_line = client.gets or break
      headers = {}
      while (line = client.gets) && line != "\r\n"
        name, value = line.split(":", 2)
        headers[name.downcase] = value.strip
      end
      body = client.read(Integer(headers.fetch("content-length", "0")))
      body = Zlib.gunzip(body) if headers["content-encoding"] == "gzip"
      decoded = @request_class.decode(body)
      @requests << Request.new(request_line.split[1], headers, body, decoded)
      answer = @response_class.encode(@response_class.new)
      client.write("HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: #{answer.bytesize}\r\n\r\n#{answer}")
    end
  rescue IOError, SystemCallError
    nil
  ensure
    client.close
  end
end
