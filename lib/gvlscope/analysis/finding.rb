# frozen_string_literal: true

module GVLScope
  module Analysis
    # A problem the trace shows, in words and numbers: one finding per cause (threads that share a
    # cause are one finding). +about+ names the threads it is about (the hogs, the convoy's or the
    # thrash's waiters, the collecting threads); +threads+ is them, then the other threads involved.
    # +explains_wait_ns+ is the GVL wait the cause accounts for and +wait_share+ that as a share of
    # all GVL wait in the trace (two findings can explain the same wait: a hog and the convoy it
    # causes). +focus_ns+ is a [start, end] worth looking at in a timeline.
    Finding = Struct.new(:kind, :about, :threads, :title, :evidence, :fix, :focus_ns, :explains_wait_ns, :wait_share,
                         keyword_init: true) do
      def thread = threads.first

      def to_h = { kind: kind, thread: thread, about: about, threads: threads, explains_wait_ns: explains_wait_ns,
                   wait_share: wait_share, title: title, evidence: evidence, fix: fix, focus_ns: focus_ns }

      def to_s = "#{title}\n  fix: #{fix}"
    end
  end
end
