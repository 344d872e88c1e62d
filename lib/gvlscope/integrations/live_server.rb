# frozen_string_literal: true

require "socket"
require "json"
require_relative "../recorder/metrics"
require_relative "../recorder/fork"
require_relative "at_exit"
require_relative "own_descriptor"
require_relative "../live/paths"
require_relative "../live/snapshot"
require_relative "../live/answer"
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
  # REQUEST_TIMEOUT of its first byte gets {"error":"..."} and the connection closed.
  #
  # One background thread serves every connection with IO.select (no thread per client, no
  # blocking call in the app's threads): it holds the GVL only to build an answer (Live::Answer:
  # 0.1 ms for 20 threads; for thousands given back every few ms; docs/performance.md).
  #
  # Bounds, whatever a client does: requests are answered one at a time, and a client whose
  # answer is not all taken is not read from (one answer buffered per client at most); each
  # deadline runs from a fixed moment (no byte moves it); past MAX_CLIENTS one connection goes
  # (#make_room: a client that keeps coming back, as `top` does, is the last to go); a failed
  # accept (EMFILE...) pauses accepting for a moment and serving goes on.
  class LiveServer
    MAX_REQUEST_BYTES = 4096
    REQUEST_TIMEOUT = 2.0 # seconds a client has to finish a request line it started
    IDLE_TIMEOUT = 60.0   # seconds an open connection may stay silent between requests
    WRITE_TIMEOUT = 5.0   # seconds a client has to take its answer
    MAX_CLIENTS = 8       # past it a new connection closes the one longest without an answer
    ACCEPT_BACKOFF = (0.05..1.0) # seconds without accepting after a failed accept, doubling
    PROTOCOL = 1
    LOWEST_PRIORITY = -3 # CRuby's: its timeslice is 100 ms >> 3, counted in 10 ms ticks

    # One client: bytes received, the answer not yet all taken (output, of which +sent+ bytes
    # went), and when it must have progressed
    # (see #deadline): since its last answer was taken (or it connected), since its unfinished
    # request began, until its answer must be taken; the process at the other end (peer_pid, nil
    # where the system does not say) and how many answers it took on this connection.
    Connection = Struct.new(:io, :input, :output, :sent, :closing, :answered_at, :request_started_at, :write_by,
                            :peer_pid, :answers)

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

      # exec replaces the image without at_exit: the socket file would stay behind at a path the
      # new image (the same pid, traced or not) does not serve. Closed and removed just before.
      def stop_for_exec
        @dir_before_exec = (@current.dir if running?)
        stop if @dir_before_exec
      end

      # The exec failed and the program goes on: so does its socket, at the same path.
      def restart_after_failed_exec
        dir = @dir_before_exec or return
        @dir_before_exec = nil
        start(dir: dir)
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

    attr_reader :path, :pid, :dir

    def initialize(dir:)
      @dir = dir
      @pid = Process.pid
      @path = Live::Paths.socket_path(dir, @pid)
      @timeslice_ns = GVLScope.timeslice_us * 1000
      @answer = Live::Answer.new
    end

    def running? = @pid == Process.pid && @thread&.alive? || false

    def start
      Metrics.enable
      remove_stale_sockets
      @server = OwnDescriptor.hide(listen)
      @thread = Thread.new do
        Thread.current.name = "gvlscope live"
        Thread.current.report_on_exception = false
        # The lowest priority gives up the GVL after 20 ms (not 100) when the program's threads
        # wait for it: an answer of thousands of threads made the program 0.2-0.5 s late.
        Thread.current.priority = LOWEST_PRIORITY
        serve_loop
      end
      # After the program's other threads are gone: joining ours in an at_exit block would let them run.
      GVLScope::AtExit.after_other_threads { stop }
      self
    end

    def stop
      return unless @pid == Process.pid

      OwnDescriptor.close(@server) if @server
      @thread&.join(1)
      @clients&.each_key { |io| OwnDescriptor.close(io) }
      File.unlink(@path) if File.socket?(@path)
    rescue SystemCallError, IOError
      nil
    end

    # The parent's socket stays; only this process's copy of the descriptor goes.
    def close_inherited
      OwnDescriptor.close(@server) if @server
      @clients&.each_key { |io| OwnDescriptor.close(io) }
    rescue IOError
      nil
    end

    # The snapshot a client gets: this process's metrics now (and with +stacks+ where each thread is).
    def snapshot(stacks: false)
      # Per-route/per-job numbers when GVLScope::Rack or GVLScope::Sidekiq counts them (advise reads them).
      breakdown = defined?(GVLScope::Breakdown) ? Breakdown.snapshot : []
      Live::Snapshot.from_metrics(Metrics.snapshot, pid: @pid, trace_path: GVLScope.trace_path, timeslice_ns: @timeslice_ns,
                                                    stacks: stacks, breakdown: breakdown,
                                                    loops: Live::Snapshot.loop_rows(Native.loop_rows))
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
      @accept_paused_until = nil
      @accept_backoff = ACCEPT_BACKOFF.begin
      loop do
        break unless only_ours
        accepting = @accept_paused_until.nil? || @accept_paused_until <= now
        # A client with an answer not all taken is not read: what it sends waits in its socket.
        readers = @clients.each_value.select { |c| c.output.empty? && !c.closing }.map(&:io)
        readers << @server if accepting
        writers = @clients.each_value.reject { |c| c.output.empty? }.map(&:io)
        wake = [*@clients.each_value.map { |c| deadline(c) }, (@accept_paused_until unless accepting)].compact.min
        ready = IO.select(readers, writers, nil, wake && [wake - now, 0].max)
        break unless only_ours # the program may have taken a number while we waited

        if ready
          ready[1].each { |io| written(@clients[io]) if @clients[io] }
          ready[0].each { |io| io == @server ? accept : receive(@clients[io]) if io == @server || @clients[io] }
        end
        expire
      end
    rescue IOError, SystemCallError
      nil # the listener was closed (stop, or a fork dropped it)
    end

    # Lets go of every client whose descriptor the program closed (and maybe reused), without
    # closing it; false if the listener's went too (serving stops: nothing of ours is left to read).
    def only_ours
      @clients.keys.reject { |io| OwnDescriptor.ours?(io) }.each do |io|
        @clients.delete(io)
        OwnDescriptor.close(io)
      end
      return true if OwnDescriptor.ours?(@server)

      OwnDescriptor.close(@server)
      false
    end

    def accept
      io = begin
        @server.accept_nonblock(exception: false)
      rescue SystemCallError
        # Out of descriptors (EMFILE, ENFILE), memory, or a connection aborted before it was taken:
        # a moment without accepting (the listener stays readable: no busy loop), then again.
        raise if @server.closed?

        @accept_paused_until = now + @accept_backoff
        @accept_backoff = [@accept_backoff * 2, ACCEPT_BACKOFF.end].min
        return
      end
      return if io == :wait_readable

      io = OwnDescriptor.hide(io)
      @accept_backoff = ACCEPT_BACKOFF.begin
      peer_pid, uid = peer_credentials(io)
      connection = Connection.new(io, +"".b, +"".b, 0, false, now, nil, nil, peer_pid, 0)
      if uid && uid != Process.euid
        return io.close if @clients.size >= MAX_CLIENTS

        @clients[io] = connection
        refuse(connection, "this socket answers only uid #{Process.euid} (#{Live::Paths.user_name(Process.euid)}); " \
                           "you are uid #{uid}")
      else
        @clients[io] = connection
        make_room(connection) if @clients.size > MAX_CLIENTS
      end
    end

    # One connection too many (the newcomer counted): the one that goes is, in this order, one of
    # the process holding the most connections (a client that keeps opening them takes its own
    # slots, not a `top`'s); one not yet answered twice (a `top` asks again every interval, a
    # one-off or idle client once or never); not the newcomer; the one longest without an answer.
    # So the newcomer is refused (told so) only when its own process holds the most connections,
    # or every other connection comes back.
    def make_room(newcomer)
      held = @clients.each_value.map(&:peer_pid).compact.tally
      victim = @clients.each_value.min_by do |c|
        [-(c.peer_pid ? held[c.peer_pid] : 1), c.answers >= 2 ? 1 : 0, c.equal?(newcomer) ? 1 : 0, c.answered_at]
      end
      holds = victim.peer_pid && held[victim.peer_pid]
      whose = holds && holds > 1 ? "pid #{victim.peer_pid} has #{holds} open" : nil
      if victim.equal?(newcomer)
        evict(victim, "busy: #{MAX_CLIENTS} connections at most#{" and #{whose}" if whose}; close one and try again")
      else
        evict(victim, "closed for a newer client: #{MAX_CLIENTS} connections at most and " \
                      "#{whose || 'this one went longest without an answer'}")
      end
    end

    # [pid, effective uid] of the connecting process: SO_PEERCRED on Linux; getpeereid (uid only)
    # on BSD/macOS; nils where neither exists (the 0700 directory alone keeps others out there).
    def peer_credentials(io)
      return io.getsockopt(:SOCKET, :PEERCRED).unpack("i2") if defined?(Socket::SO_PEERCRED) # struct ucred: pid, uid, gid

      [nil, io.getpeereid.first]
    rescue NotImplementedError, SystemCallError
      [nil, nil]
    end

    def receive(connection)
      chunk = connection.io.read_nonblock(MAX_REQUEST_BYTES, exception: false)
      return if chunk == :wait_readable
      return drop(connection) if chunk.nil? # the client hung up

      return if connection.closing # nothing more is read from a refused client

      connection.request_started_at ||= now
      connection.input << chunk
      answer_lines(connection)
    rescue IOError, SystemCallError
      drop(connection)
    end

    # The complete lines received, answered in turn while each answer is taken at once: a client
    # that sends and does not read has one answer waiting, the rest of its lines unread.
    def answer_lines(connection)
      while connection.output.empty? && !connection.closing && (line_end = connection.input.index("\n"))
        line = connection.input.slice!(0..line_end)
        # The next request began no earlier than this one was read.
        connection.request_started_at = connection.input.empty? ? nil : now
        answer(connection, line)
      end
      return if connection.closing || connection.input.index("\n")

      refuse(connection, "request longer than #{MAX_REQUEST_BYTES} bytes") if connection.input.bytesize > MAX_REQUEST_BYTES
    end

    # When the connection must have progressed: its answer taken (WRITE_TIMEOUT after it was made),
    # its request finished (REQUEST_TIMEOUT after its first byte), or a new request begun.
    def deadline(connection)
      if connection.write_by then connection.write_by
      elsif connection.request_started_at then connection.request_started_at + REQUEST_TIMEOUT
      else connection.answered_at + IDLE_TIMEOUT
      end
    end

    def answer(connection, line)
      return refuse(connection, "request longer than #{MAX_REQUEST_BYTES} bytes") if line.bytesize > MAX_REQUEST_BYTES

      request = begin
        JSON.parse(line)
      rescue JSON::ParserError
        nil
      end
      case request.is_a?(Hash) && request["get"]
      when "snapshot" then send_text(connection, snapshot_json(stacks: request["stacks"] == true))
      when "hello" then reply(connection, { "pid" => @pid, "version" => GVLScope::VERSION, "protocol" => PROTOCOL })
      else refuse(connection, 'not a request: send one JSON line, {"get":"snapshot"} or {"get":"hello"}')
      end
    rescue StandardError => e
      refuse(connection, "internal error: #{e.class}: #{e.message}") # the server goes on serving
    end

    # What #snapshot answers, as its JSON line (Live::Answer: the same text, without an object per thread).
    def snapshot_json(stacks:)
      breakdown = defined?(GVLScope::Breakdown) ? Breakdown.snapshot : []
      @answer.json(pid: @pid, trace_path: GVLScope.trace_path, timeslice_ns: @timeslice_ns, stacks: stacks,
                   breakdown: breakdown)
    end

    def reply(connection, object)
      send_text(connection, "#{JSON.generate(object)}\n")
    end

    # Answers are made only once the previous one was all taken (#answer_lines, #refuse).
    def send_text(connection, text)
      connection.output = text
      connection.sent = 0
      connection.write_by = now + WRITE_TIMEOUT
      flush(connection)
    end

    # An error line, then the connection closes once it is written (or its write deadline passes).
    def refuse(connection, message)
      connection.input.clear
      connection.closing = true
      reply(connection, { "error" => message })
    end

    # Writes what the socket takes now; true once the answer is all written. A taken answer's
    # memory is given back at once (String#clear): megabytes an answer would otherwise wait for a
    # collection, and bring one on sooner.
    def flush(connection)
      while connection.sent < connection.output.bytesize
        written = Native.send_from(connection.io, connection.output, connection.sent)
        return false if written == :wait_writable

        connection.sent += written
      end
      connection.output.clear
      connection.sent = 0
      connection.write_by = nil
      connection.answered_at = now
      connection.answers += 1
      drop(connection) if connection.closing
      !connection.closing
    rescue IOError, SystemCallError
      drop(connection)
      false
    end

    # The socket took more of an answer: once it took it all, the lines that waited are answered.
    def written(connection)
      answer_lines(connection) if flush(connection)
    end

    def expire
      moment = now
      @clients.each_value.select { |c| deadline(c) <= moment }.each do |connection|
        if connection.output.empty? && !connection.closing && !connection.input.empty?
          refuse(connection, "request not finished within #{REQUEST_TIMEOUT} s")
          drop(connection) unless connection.output.empty?
        else
          drop(connection)
        end
      end
    end

    # Closed to make room, with a word if no answer is half written (what the socket takes now).
    def evict(connection, message)
      connection.io.write_nonblock("#{JSON.generate({ 'error' => message })}\n", exception: false) if connection.output.empty?
    rescue IOError, SystemCallError
      nil
    ensure
      drop(connection)
    end

    def drop(connection)
      @clients.delete(connection.io)
      OwnDescriptor.close(connection.io)
    end
  end

  # Forked children (Process._fork) drop the parent's listener; Process.daemon forks without
  # Process._fork, so it gets the same, and the daemon (the same program going on under a new
  # pid) opens its own socket since the parent had one.
  GVLScope.after_fork { LiveServer.forget_inherited }
  GVLScope.before_exec { LiveServer.stop_for_exec }
  GVLScope.after_failed_exec { LiveServer.restart_after_failed_exec }

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
