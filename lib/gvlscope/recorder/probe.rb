# frozen_string_literal: true

require_relative "native"
require_relative "../support/vocabulary"

module GVLScope
  # Counts the GVL events fired while a block runs: a smoke test that the hook is wired
  # (test/recorder/probe_test.rb, the installed gem's check in test/gem/gem_package_test.rb). Its native hook
  # (ext/gvlscope/probe.c) is also bench/instructions.rb's "empty-hook" row, the floor of
  # docs/performance.md. Loaded on first use (autoload in gvlscope.rb), not by every require.
  #
  #   GVLScope::Probe.count { Thread.new { IO.pipe[0].wait_readable(0.01) }.join }
  #   # => {started: 1, ready: 3, resumed: 4, suspended: 4, exited: 1}
  module Probe
    # What ext/gvlscope/probe.c counts, in its order: the thread events, STARTED to EXITED.
    KINDS = Vocabulary::EVENT_KINDS[1..Vocabulary::EVENT_KINDS.index(:exited)].freeze

    def self.count
      Native.probe_start
      begin
        yield
      ensure
        counts = KINDS.zip(Native.probe_stop).to_h
      end
      counts
    end
  end
end
