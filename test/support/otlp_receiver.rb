# frozen_string_literal: true

require_relative "http_collector"

# An OTLP/HTTP endpoint for the tests: an HTTPCollector that answers each POST with an empty
# export response and hands each request back decoded with the protobuf classes the OTLP exporter
# gems ship: an ExportMetricsServiceRequest (kind :metrics, POST /v1/metrics) or an
# ExportTraceServiceRequest (kind :traces, POST /v1/traces).
class OTLPReceiver
  Request = Struct.new(:path, :headers, :body, :decoded)

  def initialize(kind = :metrics)
    @kind = kind
    if kind == :traces
      require "opentelemetry/proto/collector/trace/v1/trace_service_pb"
      service = Opentelemetry::Proto::Collector::Trace::V1
      @request_class, response_class = service::ExportTraceServiceRequest, service::ExportTraceServiceResponse
    else
      require "opentelemetry/proto/collector/metrics/v1/metrics_service_pb"
      service = Opentelemetry::Proto::Collector::Metrics::V1
      @request_class, response_class = service::ExportMetricsServiceRequest, service::ExportMetricsServiceResponse
    end
    @http = HTTPCollector.new(answer: response_class.encode(response_class.new), content_type: "application/x-protobuf")
  end

  def port = @http.port
  def endpoint = "#{@http.url}/v1/#{@kind}"

  # The next request received (decoded), or nil after +timeout+ seconds.
  def next_request(timeout: 10)
    request = @http.next_request(timeout: timeout) or return nil
    Request.new(request.path, request.headers, request.body, @request_class.decode(request.body))
  end

  def close = @http.close
end
