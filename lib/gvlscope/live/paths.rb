# frozen_string_literal: true

require "etc"
require_relative "../support/errors"
require_relative "../support/private_dir"

module GVLScope
  module Live
    # Where a process's live socket lives: <runtime dir>/gvlscope/<pid>.sock, the runtime dir being
    # $XDG_RUNTIME_DIR (per user, 0700, made by the login manager) or, without one, a private
    # /tmp/gvlscope-<uid>. Both directories are 0700 and owned by the user, so only that user (and
    # root) can reach the socket; the server checks each peer's uid, the client the directory,
    # the socket and the server's pid and uid.
    module Paths
      SOCKET_SUFFIX = ".sock"
      # /tmp whatever TMPDIR says: a client and its target must agree on the fallback directory.
      FALLBACK_ROOT = "/tmp"

      module_function

      # The directory this process's socket goes in, created 0700 when missing. Raises
      # GVLScope::Error when it exists but is not ours or others may write in it (someone else's
      # /tmp entry: serving there would let them replace our socket).
      def own_dir(env: ENV)
        parent = runtime_dir(env)
        dir = parent ? File.join(parent, "gvlscope") : File.join(FALLBACK_ROOT, "gvlscope-#{Process.euid}")
        PrivateDir.ensure!(dir)
        File.chmod(0o700, dir) unless (File.lstat(dir).mode & 0o777) == 0o700 # others need not list our sockets
        dir
      rescue Error, SystemCallError => e
        advice = parent ? "" : " (remove it, or give this process an XDG_RUNTIME_DIR of its own)"
        raise Error, "gvlscope live: #{e.message}#{advice}"
      end

      # Why the socket at +path+ must not be trusted (one line), or nil: its directory must be
      # PrivateDir's kind and the socket itself a socket of ours, else another user may be serving it.
      def distrust_socket(path)
        reason = PrivateDir.distrust(File.dirname(path))
        return reason if reason

        stat = File.lstat(path)
        return "#{path} is not a socket" unless stat.socket?
        return "#{path} belongs to uid #{stat.uid}, not to us (uid #{Process.euid})" unless stat.uid == Process.euid

        nil
      rescue SystemCallError => e
        "#{path}: #{e.message}"
      end

      def socket_path(dir, pid) = File.join(dir, "#{pid}#{SOCKET_SUFFIX}")

      # $XDG_RUNTIME_DIR when it is a directory of ours, else nil.
      def runtime_dir(env)
        dir = env["XDG_RUNTIME_DIR"]
        return nil if dir.nil? || dir.empty?

        stat = File.lstat(dir)
        stat.directory? && stat.uid == Process.euid ? dir : nil
      rescue SystemCallError
        nil
      end

      # Where a client looks for +pid+'s socket, most likely first: under the runtime dir the
      # target itself saw (/proc/PID/environ, readable by its own user), ours, then the /tmp
      # fallback of the target's uid.
      def candidates(pid, uid:)
        dirs = [target_runtime_dir(pid), ENV["XDG_RUNTIME_DIR"]].compact.reject(&:empty?).map { |d| File.join(d, "gvlscope") }
        dirs << File.join(FALLBACK_ROOT, "gvlscope-#{uid}")
        dirs.uniq.map { |dir| socket_path(dir, pid) }
      end

      def target_runtime_dir(pid)
        environ = File.binread("/proc/#{pid}/environ")
        environ.split("\0").find { |entry| entry.start_with?("XDG_RUNTIME_DIR=") }&.split("=", 2)&.last
      rescue SystemCallError
        nil
      end

      # The owner (uid) of a running process, or nil if it cannot be told (no /proc).
      def process_uid(pid)
        File.stat("/proc/#{pid}").uid
      rescue SystemCallError
        nil
      end

      def user_name(uid)
        Etc.getpwuid(uid)&.name || uid.to_s
      rescue ArgumentError
        uid.to_s
      end
    end
  end
end
