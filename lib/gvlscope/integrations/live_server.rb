# frozen_string_literal: true

require "socket"
require "json"
require_relative "../metrics"
require_relative "../fork"
require_relative "at_exit"
require_relative "../live/paths"
require_relative "../live/snapshot"
require_relative "../version"

module GVLScope
  # The live socket: what `gvlscope top PID` (and GVLScope::Live.fetch(pid:)) read. Opened only
  # when asked for (GVLSCOPE_LIVE=1 with `-rgvlscope/autorun`, `gvlscope run --live`, the Puma
  # plugin's `live: true`, or LiveServer.start), as <runtime dir>/gvlscope/<pid>.sock (Live::Paths):
  # a 0600 socket in a 0700 directory, and each peer's uid checked (SO_PEERCRED) against ours.
  #
  # Protocol: one JSON object per line each way. {"get":"snapshot"} answers
  # {"snapshot":{...Live::Snapshot#to_h...}} ("stacks":true adds where each thread is);
  # {"get":"hello"} answers {"pid":..,"version":..,"protocol":..}.
  # Anything else, a line over MAX_REQUEST_BYTES, or a request not finished within
  # REQUEST_TIMEOUT gets {"error":"..."} and the connection closed.
  #
  # One background thread serves every connection with IO.select (no thread per client, no
  # blocking call in the app's threads): it holds the GVL only to build an answer, about 0.1 ms
  # per snapshot (docs/performance.md).
  class LiveServer
    MAX_REQUEST_BYTES = 4096
    REQUEST_TIMEOUT = 2.0 # seconds a client has to finish a request line it started
    IDLE_TIMEOUT = 60.0   # seconds an open connection may stay silent between requests
    WRITE_TIMEOUT = 5.0   # seconds a client has to take its answer
    MAX_CLIENTS = 8       # past it a new connection gets an error line and is closed
    PROTOCOL = 1

    # One client: bytes received, the answer not yet taken, and when it must have progressed.
    Connection = Struct.new(:io, :input, :output, :deadline, :closing)

    class << self
      attr_reader :current

      # Opens this process's socket and starts serving it (metrics are enabled if they were off).
      # Returns the server; a second call returns the running one.
      def start(dir: nil)
        return @current if @current&.running?

        forget_inherited

        @current = new(dir: dir || Live::Paths.own_dir).start
      end

      def running? = @current&.running? || false

      def stop
        @current&.stop
        @current = nil
      end

      # In a forked child (Process._fork, or Process.daemon): the parent's listener is not ours
      # (its serving thread did not survive the fork); drop it without removing the parent's
      # socket file. Returns true if there was one.
      def forget_inherited
        server = @current
        return false if server.nil? || server.pid == Process.pid

        @current = nil
        server.close_inherited
        true
      end
    end

    attr_reader :path, :pid

    def initialize(dir:)
      @dir = dir
      @pid = Process.pid
      @path = Live::Paths.socket_path(dir, @pid)
      @timeslice_ns = GVLScope.timeslice_us * 1000
    end

    def running? = @pid == Process.pid && @thread&.alive? || false

    def start
      Metrics.enable
      remove_stale_sockets
      @server = listen
      @thread = Thread.new do
        Thread.current.name = "gvlscope live"
        Thread.current.report_on_exception = false
        serve_loop
      end
      # After the program's other threads are gone: joining ours in an at_exit block would let them run.
      GVLScope::AtExit.after_other_threads { stop }
      self
    end

    def stop
      return unless @pid == Process.pid

      @server&.close unless @server&.closed?
      @thread&.join(1)
      @clients&.each_key { |io| io.close unless io.closed? }
      File.unlink(@path) if File.socket?(@path)
    rescue SystemCallError, IOError
      nil
    end

    # The parent's socket stays; only this process's copy of the descriptor goes.
    def close_inherited
      @server&.close unless @server&.closed?
      @clients&.each_key { |io| io.close unless io.closed? }
    rescue IOError
      nil
    end

    # The snapshot a client gets: this process's metrics now (and with +stacks+ where each thread is).
    def snapshot(stacks: false)
      # Per-route/per-job numbers when GVLScope::Rack or GVLScope::Sidekiq counts them (advise reads them).
      breakdown = defined?(GVLScope::Breakdown) ? Breakdown.snapshot : []
      Live::Snapshot.from_metrics(Metrics.snapshot, pid: @pid, trace_path: GVLScope.trace_path, timeslice_ns: @timeslice_ns,
                                                    stacks: stacks, breakdown: breakdown)
    end

    private

    # The socket is created 0600 (umask 0177 for the bind: no moment when others may connect).
    def listen
      File.unlink(@path) if File.socket?(@path) # a previous process with our pid died without cleaning up
      old_umask = File.umask(0o177)
      begin
        server = UNIXServer.new(@path)
      ensure
        File.umask(old_umask)
      end
      File.chmod(0o600, @path)
      server
    rescue SystemCallError => e
      raise Error, "gvlscope live: cannot open #{@path}: #{e.message}"
    end

    # Sockets left by processes that died without at_exit (kill -9, exit!).
    def remove_stale_sockets
      Dir.glob(File.join(@dir, "*#{Live::Paths::SOCKET_SUFFIX}")).each do |path|
        pid = Integer(File.basename(path, Live::Paths::SOCKET_SUFFIX), exception: false) or next
        next if pid == @pid || alive?(pid)

        File.unlink(path)
      rescue SystemCallError
        nil
      end
    end

    def alive?(pid)
      Process.kill(0, pid)
      true
    rescue Errno::EPERM
      true
    rescue Errno::ESRCH
      false
    end

    def now = Process.clock_gettime(Process::CLOCK_MONOTONIC)

    def serve_loop
      @clients = {}
      loop do
        readers = [@server, *@clients.keys]
        writers = @clients.each_value.reject { |c| c.output.empty? }.map(&:io)
        deadline = @clients.each_value.map(&:deadline).min
        ready = IO.select(readers, writers, nil, deadline && [deadline - now, 0].max)
        if ready
          ready[1].each { |io| flush(@clients[io]) if @clients[io] }
          ready[0].each { |io| io == @server ? accept : receive(@clients[io]) if io == @server || @clients[io] }
        end
        expire
      end
    rescue IOError, SystemCallError
      nil # the listener was closed (stop, or a fork dropped it)
    end

    def accept
      io = @server.accept_nonblock(exception: false)
      return if io == :wait_readable

      connection = Connection.new(io, +"".b, +"".b, now + IDLE_TIMEOUT, false)
      @clients[io] = connection
      uid = peer_uid(io)
      if uid && uid != Process.euid
        refuse(connection, "this socket answers only uid #{Process.euid} (#{Live::Paths.user_name(Process.euid)}); " \
                           "you are uid #{uid}")
      elsif @clients.size > MAX_CLIENTS
        refuse(connection, "too many clients (#{MAX_CLIENTS}); try again")
      end
    end

    # The connecting process's effective uid (SO_PEERCRED on Linux, getpeereid on BSD/macOS), or
    # nil where neither exists (the 0700 directory alone keeps others out there).
    def peer_uid(io)
      io.getpeereid.first
    rescue NotImplementedError, SystemCallError
      nil
    end

    def receive(connection)
      chunk = connection.io.read_nonblock(MAX_REQUEST_BYTES, exception: false)
      return if chunk == :wait_readable
      return drop(connection) if chunk.nil? # the client hung up

      return if connection.closing # nothing more is read from a refused client

      connection.input << chunk
      while (line_end = connection.input.index("\n"))
        line = connection.input.slice!(0..line_end)
        answer(connection, line)
        return if connection.closing
      end
      if connection.input.bytesize > MAX_REQUEST_BYTES
        refuse(connection, "request longer than #{MAX_REQUEST_BYTES} bytes")
      else
        # A started request must be finished soon; a silent connection may idle longer.
        connection.deadline = now + (connection.input.empty? ? IDLE_TIMEOUT : REQUEST_TIMEOUT)
      end
    rescue IOError, SystemCallError
      drop(connection)
    end

    def answer(connection, line)
      return refuse(connection, "request longer than #{MAX_REQUEST_BYTES} bytes") if line.bytesize > MAX_REQUEST_BYTES

      request = begin
        JSON.parse(line)
      rescue JSON::ParserError
        nil
      end
      case request.is_a?(Hash) && request["get"]
      when "snapshot" then reply(connection, { "snapshot" => snapshot(stacks: request["stacks"] == true).to_h })
      when "hello" then reply(connection, { "pid" => @pid, "version" => GVLScope::VERSION, "protocol" => PROTOCOL })
      else refuse(connection, 'not a request: send one JSON line, {"get":"snapshot"} or {"get":"hello"}')
      end
    rescue StandardError => e
      refuse(connection, "internal error: #{e.class}: #{e.message}") # the server goes on serving
    end

    def reply(connection, object)
      connection.output << JSON.generate(object) << "\n"
      connection.deadline = now + WRITE_TIMEOUT
      flush(connection)
    end

    # An error line, then the connection closes once it is written (or its write deadline passes).
    def refuse(connection, message)
      connection.input.clear
      connection.closing = true
      reply(connection, { "error" => message })
    end

    def flush(connection)
      until connection.output.empty?
        written = connection.io.write_nonblock(connection.output, exception: false)
        return if written == :wait_writable

        connection.output = connection.output.byteslice(written..)
      end
      connection.deadline = now + (connection.input.empty? ? IDLE_TIMEOUT : REQUEST_TIMEOUT)
      drop(connection) if connection.closing
    rescue IOError, SystemCallError
      drop(connection)
    end

    def expire
      moment = now
      @clients.each_value.select { |c| c.deadline <= moment }.each do |connection|
        if connection.output.empty? && !connection.closing && !connection.input.empty?
          refuse(connection, "request not finished within #{REQUEST_TIMEOUT} s")
          drop(connection) unless connection.output.empty?
        else
          drop(connection)
        end
      end
    end

    def drop(connection)
      @clients.delete(connection.io)
      connection.io.close unless connection.io.closed?
    end
  end

  # Forked children (Process._fork) drop the parent's listener; Process.daemon forks without
  # Process._fork, so it gets the same, and the daemon (the same program going on under a new
  # pid) opens its own socket since the parent had one.
  GVLScope.after_fork { LiveServer.forget_inherited }

  module LiveDaemonHook
    def daemon(*)
      server = LiveServer.current
      path = server&.path
      result = super
      if LiveServer.forget_inherited
        File.unlink(path) if path && File.socket?(path) # the parent exited without at_exit
        LiveServer.start
      end
      result
    end
  end
  Process.singleton_class.prepend(LiveDaemonHook)
end
