# frozen_string_literal: true

require_relative "../support/units"

module GVLScope
  module Analysis
    # A problem the trace shows, in words and numbers: one finding per cause (threads that share a
    # cause are one finding). +about+ names the threads it is about (the hogs, the convoy's or the
    # thrash's waiters, the collecting threads); +threads+ is them, then the other threads involved.
    # +explains_wait_ns+ is the GVL wait the cause accounts for and +wait_share+ that as a share of
    # all GVL wait in the trace (two findings can explain the same wait: a hog and the convoy it
    # causes). +focus_ns+ is a [start, end] worth looking at in a timeline. +loop_wait+: true when
    # explains_wait_ns is the wait of fibers for an event loop's turn (docs/fibers.md), not GVL
    # wait: wait_share is then nil.
    Finding = Struct.new(:kind, :about, :threads, :title, :evidence, :fix, :focus_ns, :explains_wait_ns, :wait_share,
                         :loop_wait, keyword_init: true) do
      def thread = threads.first

      # "120 ms, 35% of all wait", or "90 ms of loop wait": what the reports put before the title.
      def explains
        return "#{Units.ms_rounded(explains_wait_ns)} of loop wait" if loop_wait

        format("%s, %d%% of all wait", Units.ms_rounded(explains_wait_ns), (100 * wait_share).round)
      end

      def to_h = { kind: kind, thread: thread, about: about, threads: threads, explains_wait_ns: explains_wait_ns,
                   wait_share: wait_share, title: title, evidence: evidence, fix: fix, focus_ns: focus_ns,
                   **(loop_wait ? { loop_wait: true } : {}) }

      def to_s = "#{title}\n  fix: #{fix}"

      # What a list of findings is ranked by (Report#findings), as its heading says it.
      def self.ranked_by(findings) = findings.any?(&:loop_wait) ? "the wait (GVL or event loop)" : "the GVL wait"
    end
  end
end
