# frozen_string_literal: true

require_relative "support/errors"
require_relative "live/snapshot"
require_relative "live/paths"
require_relative "live/client"
require_relative "live/scrape"

module GVLScope
  # Numbers of a process while it runs, from outside it: its live socket (LiveServer, opened
  # only when asked for) or the Puma plugin's Prometheus endpoint. What `gvlscope top` and
  # `gvlscope advise` read. Needs no native code.
  #
  #   before = GVLScope::Live.fetch(pid: 1234)
  #   sleep 1
  #   interval = GVLScope::Live.fetch(pid: 1234) - before
  #   interval.held_ratio # => 0.93
  module Live
    module_function

    # One Snapshot now from exactly one source: +pid+ (its socket under the runtime dir),
    # +socket+ (a socket path) or +url+ (a /metrics URL). GVLScope::Error, one line, when the
    # source cannot answer.
    # +stacks+: each thread's row also says where its code is now (socket sources only).
    def fetch(pid: nil, url: nil, socket: nil, stacks: false)
      source = source(pid: pid, url: url, socket: socket)
      source.snapshot(stacks: stacks)
    ensure
      source&.close
    end

    # A reusable source (Client or Scrape: #snapshot, #close) for repeated reads.
    def source(pid: nil, url: nil, socket: nil)
      given = { pid: pid, url: url, socket: socket }.compact
      raise Error, "Live.fetch needs exactly one of pid:, url:, socket: (got #{given.keys.join(', ')})" unless given.size == 1

      if pid then Client.for_pid(pid)
      elsif socket then Client.new(socket)
      else Scrape.new(url)
      end
    end
  end
end
