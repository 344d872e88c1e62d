# frozen_string_literal: true

require "fcntl"

module GVLScope
  # A descriptor gvlscope keeps open inside the program: the live socket and its clients, the
  # /metrics listener, the StatsD socket. Programs close every inherited descriptor (daemonizers,
  # test harnesses: `(3..1024).each { |fd| IO.for_fd(fd).close rescue nil }`) and get the numbers
  # back for files of their own: gvlscope must then never read, write or close through its old IO.
  # So each sits high (a program's files get the lowest free numbers) and its identity (device,
  # inode) is checked before it is used; one that is no longer ours is let go without closing it.
  # The recorder's files do the same in C (ext/gvlscope/trace_framing.c).
  module OwnDescriptor
    FLOOR = 900 # the recorder's: above what programs hold, below the common limit of 1024

    module_function

    # io moved to a descriptor at FLOOR or above (io itself if there is no room there), as an IO of
    # its class (IO.for_fd sets close-on-exec), with its identity remembered.
    def hide(io)
      moved = io.class.for_fd(io.fcntl(Fcntl::F_DUPFD, floor))
      io.close
      remember(moved)
    rescue SystemCallError, IOError
      remember(io)
    end

    def floor
      soft, = Process.getrlimit(:NOFILE)
      soft <= FLOOR ? soft / 2 : FLOOR
    end

    def remember(io)
      stat = io.stat
      io.instance_variable_set(:@gvlscope_identity, [stat.dev, stat.ino])
      io
    end

    # True while io's descriptor is still the file or socket gvlscope opened.
    def ours?(io)
      return false if io.closed?

      stat = io.stat
      io.instance_variable_get(:@gvlscope_identity) == [stat.dev, stat.ino]
    rescue SystemCallError, IOError
      false
    end

    # Closes io if it is still ours; else lets go of it and leaves its descriptor (the program's
    # now) open, even when the GC collects it.
    def close(io)
      io.autoclose = false unless ours?(io)
      io.close unless io.closed?
    rescue IOError, SystemCallError
      nil
    end
  end
end
