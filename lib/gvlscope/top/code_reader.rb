# frozen_string_literal: true

require_relative "../support/errors"

module GVLScope
  module Top
    # Code locations for `gvlscope top`, from the trace the target writes while it runs (a trace
    # with stacks: `gvlscope run --live`, `gvlscope top --trace PATH -- COMMAND`). The trace is
    # read here, in top's process, never in the target: re-read at most every REREAD_EVERY seconds
    # when it grew, up to MAX_BYTES (past it top stops re-reading and says so). The locations
    # cover the trace from its start, not only the last interval.
    class CodeReader
      REREAD_EVERY = 5.0
      MAX_BYTES = 64 << 20

      attr_reader :note

      def initialize(max_bytes: MAX_BYTES)
        @max_bytes = max_bytes
        @path = nil
        @read_at = nil
        @size = nil
        @codes = {}
        @note = nil
      end

      # { serial => { "holding" => ..., "released_at" => ... } } for the trace at +path+ (nil: none).
      def codes(path)
        return {} unless path
        return @codes if path == @path && @read_at && now - @read_at < REREAD_EVERY

        size = File.size?(path)
        return @codes if size.nil? || (path == @path && size == @size)
        if size > @max_bytes
          @note = "code: the trace #{path} passed #{@max_bytes >> 20} MB; locations as of then"
          return @codes
        end

        @path = path
        @size = size
        @read_at = now
        @codes = read(path)
      end

      private

      def now = Process.clock_gettime(Process::CLOCK_MONOTONIC)

      def read(path)
        require_relative "../model"
        require_relative "../analysis/code_locations"
        timeline = Model.timeline(path)
        unless timeline.stacks?
          @note = "code: the trace #{path} has no stacks (recorded with --no-stacks)"
          return {}
        end

        locations = Analysis::CodeLocations.new(timeline)
        @note = "code: from the trace #{File.basename(path)} since it began"
        timeline.threads.each_key.to_h do |serial|
          holding = locations.holder_profile(thread: serial).first
          site = locations.release_sites(threads: [serial]).first
          [serial, { "holding" => holding&.name, "released_at" => site&.name }.compact]
        end.reject { |_, code| code.empty? }
      rescue Error, SystemCallError, EOFError => e
        @note = "code: cannot read the trace yet (#{e.message.lines.first.strip})"
        @codes
      end
    end
  end
end
