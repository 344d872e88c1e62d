# frozen_string_literal: true

module GVLScope
  module Analysis
    # A problem the trace shows, in words and numbers. +threads+ names the thread it is about
    # first, then the threads involved; +focus_ns+ is a [start, end] worth looking at in a timeline.
    Finding = Struct.new(:kind, :threads, :title, :evidence, :fix, :focus_ns, keyword_init: true) do
      def thread = threads.first

      def to_h = { kind: kind, thread: thread, threads: threads, title: title, evidence: evidence, fix: fix,
                   focus_ns: focus_ns }

      def to_s = "#{title}\n  fix: #{fix}"
    end
  end
end
