# frozen_string_literal: true

require "socket"
require "ipaddr"
require_relative "../support/errors"
require_relative "own_descriptor"

module GVLScope
  # The smallest HTTP server that Prometheus can scrape: GET /metrics, on a loopback address only
  # (the numbers describe the process; they are not for the internet). Each connection is served by
  # a short-lived thread of its own, with a deadline for the whole request, so a client that stalls
  # delays nobody else; past MAX_CLIENTS a new connection closes the oldest one still sending its
  # request (stalled clients cannot keep scrapes out). A failed accept (out of descriptors, an
  # aborted connection) pauses accepting for a moment; serving goes on. The port is bound when the
  # server is created, so "port in use" is an error at boot.
  class MetricsServer
    CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
    REQUEST_DEADLINE = 2 # seconds a client has to send its whole request, and to take the answer
    MAX_CLIENTS = 8      # connections served at once; past it one is closed unanswered (scrapers retry)
    ACCEPT_BACKOFF = (0.05..1.0) # seconds without accepting after a failed accept, doubling
    MAX_REQUEST_BYTES = 16_384

    def initialize(host:, port:, &body)
      unless port.is_a?(Integer) && port.between?(0, 65_535)
        raise Error, "gvlscope: prometheus_port must be an Integer in 0..65535, got #{port.inspect}"
      end
      raise Error, "gvlscope: prometheus_host must be a loopback address, got #{host.inspect}" unless loopback?(host)

      @body = body
      @server = OwnDescriptor.hide(TCPServer.new(host, port))
    rescue Errno::EADDRINUSE
      raise Error, "gvlscope: cannot serve /metrics on #{host}:#{port}: the port is in use", cause: nil
    rescue SystemCallError, SocketError => e
      raise Error, "gvlscope: cannot serve /metrics on #{host}:#{port}: #{e.message}", cause: nil
    end

    def port = @server.addr[1]

    def start
      @clients = {} # connection being served => whether its request is still being read
      @clients_lock = Mutex.new
      @thread = Thread.new do
        Thread.current.name = "gvlscope metrics"
        accept_loop
      end
      self
    end

    # In a forked child that does not serve: drop the inherited socket, leave the parent's open.
    def close_inherited
      OwnDescriptor.close(@server)
    end

    def stop
      OwnDescriptor.close(@server)
      @thread&.join(2)
    end

    private

    def loopback?(host)
      host == "localhost" || IPAddr.new(host).loopback?
    rescue IPAddr::Error
      false
    end

    def accept_loop
      backoff = ACCEPT_BACKOFF.begin
      until @server.closed?
        break OwnDescriptor.close(@server) unless OwnDescriptor.ours?(@server) # the program closed it: done

        begin
          client = OwnDescriptor.hide(@server.accept)
        rescue IOError
          break # closed by stop
        rescue SystemCallError
          break if @server.closed?

          # EMFILE, ENFILE, ENOMEM, ECONNABORTED...: the process's trouble for now, not the
          # server's for good (the connection waits in the backlog; a scraper retries).
          sleep backoff
          backoff = [backoff * 2, ACCEPT_BACKOFF.end].min
          next
        end
        backoff = ACCEPT_BACKOFF.begin
        accept(client)
      end
    end

    def accept(client)
      evicted, admitted = @clients_lock.synchronize do
        # Oldest first (a Hash keeps its order): the one stalled longest makes room.
        stalled = (@clients.find { |_, reading| reading }&.first if @clients.size >= MAX_CLIENTS)
        @clients.delete(stalled)
        [stalled, @clients.size < MAX_CLIENTS && (@clients[client] = true)]
      end
      OwnDescriptor.close(evicted) if evicted # its thread's wait ends with IOError (outside the lock: that thread takes it to leave)
      return OwnDescriptor.close(client) unless admitted

      Thread.new do
        Thread.current.name = "gvlscope metrics client"
        serve(client, now + REQUEST_DEADLINE)
      rescue StandardError
        nil # a client that hangs up, stalls or sends garbage must not stop the server
      ensure
        OwnDescriptor.close(client)
        @clients_lock.synchronize { @clients.delete(client) }
      end
    rescue ThreadError # no thread to be had now: this client goes unanswered, the next may not
      OwnDescriptor.close(client)
      @clients_lock.synchronize { @clients.delete(client) }
    end

    def serve(client, deadline)
      return unless OwnDescriptor.ours?(client)

      request = read_request(client, deadline) or return
      @clients_lock.synchronize { @clients[client] &&= false } # being answered: not to be evicted
      method, target = request.lines.first.to_s.split(" ", 3)
      if method == "GET" && target.to_s.split("?").first == "/metrics"
        begin
          body = @body.call
        rescue StandardError => e
          return respond(client, deadline, "500 Internal Server Error", "text/plain", "gvlscope: #{e.class}: #{e.message}\n")
        end
        respond(client, deadline, "200 OK", CONTENT_TYPE, body)
      else
        respond(client, deadline, "404 Not Found", "text/plain", "gvlscope serves GET /metrics only\n")
      end
    end

    # The request line and headers, up to the blank line (or the client's EOF); nil if the deadline
    # passes first or the request is too long.
    def read_request(client, deadline)
      request = +"".b
      until request.include?("\r\n\r\n") || request.include?("\n\n")
        return nil if request.bytesize > MAX_REQUEST_BYTES
        return nil unless client.wait_readable(seconds_left(deadline))

        chunk = client.read_nonblock(4096, exception: false)
        break if chunk.nil? # EOF: what came is the request
        return nil if chunk == :wait_readable && seconds_left(deadline).zero?

        request << chunk if chunk.is_a?(String)
      end
      request.empty? ? nil : request
    end

    def now = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    def seconds_left(deadline) = [deadline - now, 0].max

    def respond(client, deadline, status, type, body)
      return unless OwnDescriptor.ours?(client) # the program closed it (and may have its number now)

      data = "HTTP/1.1 #{status}\r\nContent-Type: #{type}\r\nContent-Length: #{body.bytesize}\r\n" \
             "Connection: close\r\n\r\n".b + body.b
      until data.empty?
        written = client.write_nonblock(data, exception: false)
        if written == :wait_writable
          # A client that does not read its answer gets until the deadline, like one that does not send.
          return unless client.wait_writable(seconds_left(deadline))
        else
          data = data.byteslice(written..)
        end
      end
    end
  end
end
