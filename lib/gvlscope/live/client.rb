# frozen_string_literal: true

require "socket"
require "json"
require_relative "../support/errors"
require_relative "paths"
require_relative "snapshot"

module GVLScope
  module Live
    # A connection to a process's live socket (integrations/live_server.rb). It stays open
    # between snapshots, so one refresh costs the target one request, not a connection.
    class Client
      TIMEOUT = 3.0 # seconds for an answer: the server answers in well under a millisecond
      MAX_ANSWER_BYTES = 64 << 20

      attr_reader :path, :pid

      # The client of +pid+'s socket: GVLScope::Error, one line, when there is none to talk to.
      def self.for_pid(pid)
        pid = Integer(pid, exception: false)
        raise Error, "not a process id: #{pid.inspect}" unless pid&.positive?

        check_process!(pid)
        uid = Paths.process_uid(pid) || Process.euid
        if uid != Process.euid
          raise Error, "pid #{pid} runs as #{Paths.user_name(uid)} (uid #{uid}); its live socket answers only that user: " \
                       "run gvlscope top as #{Paths.user_name(uid)}"
        end
        present = Paths.candidates(pid, uid: uid).select { |candidate| File.exist?(candidate) || File.symlink?(candidate) }
        path = present.find { |candidate| Paths.distrust_socket(candidate).nil? }
        if path.nil? && present.any?
          raise Error, "pid #{pid}: not reading #{present.first}: #{Paths.distrust_socket(present.first)} " \
                       "(another user may be serving it)"
        end
        unless path
          raise Error, "pid #{pid} has no gvlscope live socket: start it with GVLSCOPE_LIVE=1 and -rgvlscope/autorun, " \
                       "gvlscope run --live, gvlscope top -- COMMAND, or the Puma plugin's live: true"
        end
        new(path, pid: pid)
      end

      def self.check_process!(pid)
        Process.kill(0, pid)
      rescue Errno::ESRCH
        raise Error, "no process #{pid} (it is not running)"
      rescue Errno::EPERM
        nil # someone else's: the uid check says so more clearly
      end

      def initialize(path, pid: nil)
        @path = path
        @pid = pid
        @socket = nil
      end

      # One Live::Snapshot, now; with +stacks+, each thread's row says where its code is.
      def snapshot(stacks: false)
        Snapshot.from_h(request("snapshot", stacks ? { "stacks" => true } : {}).fetch("snapshot"))
      end

      # { "pid", "version", "protocol" } of the server.
      def hello = request("hello")

      def close
        @socket&.close
        @socket = nil
      end

      private

      def request(what, options = {})
        attempts = 0
        begin
          socket = connect
          begin
            socket.write(JSON.generate({ "get" => what, **options }), "\n")
          rescue Errno::EPIPE, Errno::ECONNRESET
            nil # the server may have answered and closed before reading (a refusal): read what it said
          end
          answer = read_line(socket)
        rescue Errno::EPIPE, Errno::ECONNRESET, EOFError
          close
          # The server closes a connection left idle too long: one new connection, then give up.
          retry if (attempts += 1) == 1
          raise Error, "#{who}: the live socket closed the connection"
        end
        message = JSON.parse(answer)
        if message.is_a?(Hash) && message["error"]
          close
          raise Error, "#{who}: #{message['error']}"
        end
        message
      rescue JSON::ParserError
        close
        raise Error, "#{who}: the live socket answered something else than JSON"
      end

      def connect
        @socket ||= UNIXSocket.new(@path).tap { |socket| check_peer!(socket) }
      rescue Errno::ENOENT
        raise Error, "#{who}: no live socket at #{@path} (the process stopped serving, or exited)"
      rescue Errno::ECONNREFUSED
        raise Error, "#{who}: nobody answers at #{@path} (the process exited without removing it)"
      rescue Errno::EACCES
        raise Error, "#{who}: permission denied on #{@path}: it belongs to another user"
      end

      # The server must be a process of ours, and +pid+ itself when we asked for it: a socket
      # another user put in our place would otherwise serve us made-up numbers.
      def check_peer!(socket)
        peer_pid, peer_uid = peer_credentials(socket)
        if peer_uid && peer_uid != Process.euid
          refuse_peer!(socket, "is served by uid #{peer_uid}, not by us (uid #{Process.euid})")
        elsif @pid && peer_pid && peer_pid != @pid
          refuse_peer!(socket, "is served by pid #{peer_pid}, not by pid #{@pid}")
        end
      end

      # [pid, uid] of the process that listens (SO_PEERCRED on Linux; the uid alone from
      # getpeereid elsewhere; nil where neither exists).
      def peer_credentials(socket)
        if defined?(Socket::SO_PEERCRED)
          socket.getsockopt(:SOCKET, :PEERCRED).unpack("i2") # struct ucred: pid, uid, gid
        else
          [nil, socket.getpeereid.first]
        end
      rescue NotImplementedError, SystemCallError
        [nil, nil]
      end

      def refuse_peer!(socket, problem)
        socket.close
        raise Error, "#{who}: not reading #{@path}: it #{problem}"
      end

      def read_line(socket)
        line = +"".b
        deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + TIMEOUT
        until line.end_with?("\n")
          left = deadline - Process.clock_gettime(Process::CLOCK_MONOTONIC)
          raise Error, "#{who}: no answer within #{TIMEOUT} s" unless left.positive? && socket.wait_readable(left)

          chunk = socket.read_nonblock(1 << 16, exception: false)
          raise EOFError if chunk.nil?

          line << chunk if chunk.is_a?(String)
          raise Error, "#{who}: answer longer than #{MAX_ANSWER_BYTES} bytes" if line.bytesize > MAX_ANSWER_BYTES
        end
        line
      end

      def who = @pid ? "pid #{@pid}" : @path
    end
  end
end
