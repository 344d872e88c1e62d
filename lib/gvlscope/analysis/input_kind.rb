# frozen_string_literal: true

require_relative "../support/errors"

module GVLScope
  module Analysis
    # What a file given to `gvlscope diff` or `gvlscope advise` holds, from its first bytes: a
    # trace (.gvl or gvl-tracing JSON), a live snapshot file (what `gvlscope top --once --json`
    # prints) or a /metrics scrape saved to a file. One test for both commands, so a file one
    # takes as a snapshot the other does too.
    module InputKind
      module_function

      HEAD_BYTES = 4096
      SNAPSHOT_HEAD = /\A\s*\[?\s*\{\s*"version"\s*:\s*\d+\s*,\s*"source"\s*:/
      SCRAPE_HEAD = /^(?:# (?:HELP|TYPE) )?gvlscope_\w+/

      # "trace", "snapshot" or "scrape"; GVLScope::Error for a file that is missing, a directory
      # or unreadable.
      def of(path)
        raise Error, "#{path}: no such file" unless File.exist?(path)
        raise Error, "#{path}: is a directory, not a trace, snapshot or scrape" if File.directory?(path)

        head = File.open(path, "rb") { |io| io.read(HEAD_BYTES) }.to_s
        text = head.dup.force_encoding(Encoding::UTF_8).scrub
        return "snapshot" if text.match?(SNAPSHOT_HEAD)
        return "scrape" if !text.lstrip.start_with?("[", "{") && text.match?(SCRAPE_HEAD) && !head.start_with?("GVLSCOPE")

        "trace"
      rescue SystemCallError => e
        raise Error, "#{path}: cannot read it: #{e.message.sub(/ @ .*\z/m, '')}"
      end
    end
  end
end
