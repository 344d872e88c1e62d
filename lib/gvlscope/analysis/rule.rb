# frozen_string_literal: true

require_relative "../units"
require_relative "../vocabulary"
require_relative "blame"
require_relative "finding"

module GVLScope
  module Analysis
    # What every finding rule shares. A rule asks for repeated, large effects (several events,
    # each a good part of a timeslice) so that a healthy program gets no finding: none is better
    # than a false one (tests check both ways). A rule is built with the Report and answers
    # #findings, an Array of Finding.
    class Rule
      def initialize(report)
        @report = report
        @timeline = report.timeline
        @timeslice_ns = report.timeslice_ns
        # Per-thread totals, already summed (ThreadStats::Row): rules read these, the blame and the
        # report's other summaries, never intervals (a streaming engine keeps none).
        @rows = report.all_rows.to_h { |row| [row.serial, row] }
        @labels = @rows.transform_values(&:label)
      end

      private

      # { holder label (or Blame::HAND_OFF) => share of the wait time }, largest first.
      def shares(holders)
        total = holders.values.sum.to_f
        return {} unless total.positive?

        holders.sort_by { |_, ns| -ns }.to_h do |serial, ns|
          [serial == Blame::HAND_OFF ? Blame::HAND_OFF : @labels.fetch(serial) { Vocabulary.thread_label(nil, serial) }, (ns / total).round(4)]
        end
      end

      def describe_shares(holders)
        shown = holders.first(3).select { |_, share| share >= 0.01 }
        shown.map do |holder, share|
          "#{holder == Blame::HAND_OFF ? 'nobody (hand-off)' : quote(holder)} #{(100 * share).round}%"
        end.join(", ")
      end

      # "The holder was in `Counter#spin` (lib/counter.rb:8) 97% of the time" from the holder
      # samples of +rows+ (CodeLocations rows); nil without samples.
      def holder_code(rows, subject)
        top = rows.first or return nil
        format("%s in %s %d%% of the time", subject, top.name, (100 * top.share).round)
      end

      # Sentences that name code, appended to a finding's title: "" when there are none.
      def code_sentences(*sentences)
        sentences.compact.map { |sentence| ". #{sentence}" }.join
      end

      # { holder_frames: [...], release_sites: [...] } for a finding's evidence (empty without stacks).
      def code_evidence(holders, sites)
        return {} unless @timeline.stacks?

        { holder_frames: holders.first(5).map(&:to_h), release_sites: sites.first(5).map(&:to_h) }
      end

      def percent(ns) = @report.duration_ns.positive? ? (100.0 * ns / @report.duration_ns).round : 0
      def quote(label) = "'#{label}'"
      def ms(ns) = Units.ms_rounded(ns)
    end
  end
end
