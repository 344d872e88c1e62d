# frozen_string_literal: true

require "socket"
require "ipaddr"
require_relative "../errors"

module GVLScope
  # The smallest HTTP server that Prometheus can scrape: GET /metrics, one connection at a time,
  # on a loopback address only (the numbers describe the process; they are not for the internet).
  # The port is bound when the server is created, so "port in use" is an error at boot.
  class MetricsServer
    CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
    READ_TIMEOUT = 2 # seconds a client may take to send its request

    def initialize(host:, port:, &body)
      unless port.is_a?(Integer) && port.between?(0, 65_535)
        raise Error, "gvlscope: prometheus_port must be an Integer in 0..65535, got #{port.inspect}"
      end
      raise Error, "gvlscope: prometheus_host must be a loopback address, got #{host.inspect}" unless loopback?(host)

      @body = body
      @server = TCPServer.new(host, port)
    rescue Errno::EADDRINUSE
      raise Error, "gvlscope: cannot serve /metrics on #{host}:#{port}: the port is in use", cause: nil
    rescue SystemCallError, SocketError => e
      raise Error, "gvlscope: cannot serve /metrics on #{host}:#{port}: #{e.message}", cause: nil
    end

    def port = @server.addr[1]

    def start
      @thread = Thread.new do
        Thread.current.name = "gvlscope metrics"
        loop do
          client = @server.accept
          begin
            serve(client)
          rescue StandardError
            nil # a client that hangs up or sends garbage must not stop the server
          ensure
            client.close
          end
        end
      rescue IOError, SystemCallError
        nil # closed by stop
      end
      self
    end

    # In a forked child that does not serve: drop the inherited socket, leave the parent's open.
    def close_inherited
      @server.close unless @server.closed?
    end

    def stop
      @server.close unless @server.closed?
      @thread&.join(2)
    end

    private

    def loopback?(host)
      host == "localhost" || IPAddr.new(host).loopback?
    rescue IPAddr::Error
      false
    end

    def serve(client)
      return unless client.wait_readable(READ_TIMEOUT)

      method, target = client.gets("\r\n", 8192).to_s.split(" ", 3)
      20.times { break if client.wait_readable(READ_TIMEOUT).nil? || client.gets("\r\n", 8192).to_s.strip.empty? }
      if method == "GET" && target.to_s.split("?").first == "/metrics"
        begin
          body = @body.call
        rescue StandardError => e
          return respond(client, "500 Internal Server Error", "text/plain", "gvlscope: #{e.class}: #{e.message}\n")
        end
        respond(client, "200 OK", CONTENT_TYPE, body)
      else
        respond(client, "404 Not Found", "text/plain", "gvlscope serves GET /metrics only\n")
      end
    end

    def respond(client, status, type, body)
      client.write("HTTP/1.1 #{status}\r\nContent-Type: #{type}\r\nContent-Length: #{body.bytesize}\r\n" \
                   "Connection: close\r\n\r\n", body)
    end
  end
end
