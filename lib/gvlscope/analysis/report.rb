# frozen_string_literal: true

require_relative "../errors"
require_relative "../model/scan"
require_relative "thread_stats"
require_relative "histograms"
require_relative "blame"
require_relative "code_locations"
require_relative "rules"

module GVLScope
  module Analysis
    # What the GVL did in one trace, and why: per-thread totals, GVL held % per Ractor, log2
    # histograms and findings (Analysis::RULES), each with evidence and a suggested fix. The
    # formats ReportText, ReportJSON and ReportHTML show it.
    class Report
      attr_reader :timeline, :stats, :only_thread

      # +timeline+: a Model::Timeline, or a Model::Scan (the native engine's pass: the same
      # answers, no intervals kept). +thread+: a thread label; the table and findings then show
      # only that thread.
      def initialize(timeline, thread: nil)
        @timeline = timeline
        @stats = ThreadStats.new(timeline)
        @only_thread = thread
        if thread && @stats.rows.none? { |row| row.label == thread }
          raise Error, "no thread named #{thread.inspect} in #{timeline.file.path} " \
                       "(threads: #{@stats.rows.map(&:label).uniq.join(', ')})"
        end
      end

      # Built only when a finding needs to say who held the GVL: it is a pass over every interval.
      def blame = @blame ||= Blame.new(@timeline)

      # Which code: release sites and the holders' profile (a trace with stacks).
      def code_locations = @code_locations ||= CodeLocations.new(@timeline)

      def file = @timeline.file
      def duration_ns = @timeline.duration_ns
      def timeslice_ns = file.timeslice_ns

      # Every thread's row (the whole trace), and the rows shown (those of --thread, if given).
      def all_rows = @stats.rows

      def rows
        return all_rows unless @only_thread

        all_rows.select { |row| row.label == @only_thread }
      end

      # One per cause, the one that explains the most GVL wait first (rules' order on ties).
      def findings
        @findings ||= begin
          all = RULES.flat_map { |rule| rule.new(self).findings }.each_with_index
                     .sort_by { |finding, index| [-finding.explains_wait_ns, index] }.map(&:first)
          @only_thread ? all.select { |finding| finding.threads.include?(@only_thread) } : all
        end
      end

      # The share of wall time each Ractor's GVL was held (by a running or collecting thread).
      def held_ratio_by_ractor
        return {} unless duration_ns.positive?

        all_rows.group_by(&:ractor_id).transform_values do |rows|
          rows.sum { |row| row.run_ns + row.gc_ns } / duration_ns.to_f
        end
      end

      def wait_ns = rows.sum(&:wait_ns)

      # The median of every GVL wait of every thread (the whole trace, as all_rows): Analysis.median.
      def all_waits_median_ns = @stats.median_wait_ns

      # See Histograms.
      def histograms
        @histograms ||= if @timeline.is_a?(Model::Scan)
                          Histograms.of_scan(@timeline, selected_threads.map(&:serial))
                        else
                          Histograms.of(selected_threads, @timeline.waiters_at_acquire)
                        end
      end

      def selected_threads
        threads = @timeline.threads.values
        @only_thread ? threads.select { |thread| thread.label == @only_thread } : threads
      end
    end
  end
end
