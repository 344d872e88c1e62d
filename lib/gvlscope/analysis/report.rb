# frozen_string_literal: true

require_relative "../support/errors"
require_relative "../model/scan"
require_relative "thread_stats"
require_relative "histograms"
require_relative "blame"
require_relative "code_locations"
require_relative "overview"
require_relative "rules"
require_relative "advisor_inputs"

module GVLScope
  module Analysis
    # What the GVL did in one trace, and why: per-thread totals, GVL held % per Ractor, log2
    # histograms and findings (Analysis::RULES), each with evidence and a suggested fix. The
    # formats ReportText, ReportJSON and ReportHTML show it.
    class Report
      attr_reader :timeline, :stats, :only_thread

      # +timeline+: a Model::Scan (the native engine's passes over the trace; no interval kept).
      # +thread+: a thread label (or a name several threads share); the table and findings then
      # show only that thread (those threads).
      def initialize(timeline, thread: nil)
        @timeline = timeline
        @stats = ThreadStats.new(timeline)
        @only_thread = thread
        if thread && @stats.rows.none? { |row| Vocabulary.thread_named?(row.label, thread) }
          raise Error, "no thread named #{thread.inspect} in #{timeline.file.path} " \
                       "(threads: #{@stats.rows.map(&:label).uniq.join(', ')})"
        end
      end

      # Built only when a finding needs to say who held the GVL.
      def blame = @blame ||= Blame.new(@timeline)

      # What `gvlscope advise` answers on this trace (an Advisor::Advice, with its defaults), or why
      # it has none (a String): the findings whose fix is a thread count quote it, so the two agree.
      def advice
        return @advice if defined?(@advice)

        @advice = Advisor.new(AdvisorInputs.from_report(self)).advice
      rescue Error => e
        @advice = e.message
      end

      # Which code: release sites and the holders' profile (a trace with stacks).
      def code_locations = @code_locations ||= CodeLocations.new(@timeline)

      def file = @timeline.file
      def duration_ns = @timeline.duration_ns
      def timeslice_ns = file.timeslice_ns

      # Every thread's row (the whole trace), and the rows shown (those of --thread, if given).
      def all_rows = @stats.rows

      def rows
        return all_rows unless @only_thread

        all_rows.select { |row| Vocabulary.thread_named?(row.label, @only_thread) }
      end

      # One per cause, the one that explains the most GVL wait first (rules' order on ties).
      def findings
        @findings ||= begin
          all = RULES.flat_map { |rule| rule.new(self).findings }.each_with_index
                     .sort_by { |finding, index| [-finding.explains_wait_ns, index] }.map(&:first)
          @only_thread ? all.select { |finding| finding.threads.any? { |label| Vocabulary.thread_named?(label, @only_thread) } } : all
        end
      end

      # The share of wall time each Ractor's GVL was held (by a running or collecting thread).
      def held_ratio_by_ractor = @stats.held_ratio_by_ractor(duration_ns)

      def wait_ns = rows.sum(&:wait_ns)

      # The median of every GVL wait of every thread (the whole trace, as all_rows): Analysis.median.
      def all_waits_median_ns = @stats.median_wait_ns

      # See Histograms.
      def histograms = @histograms ||= Histograms.of(@timeline, selected_threads.map(&:serial))

      # The whole trace in +bins+ slices per thread (Analysis::Overview): what the HTML report draws
      # zoomed out: the lanes the engine summed in its pass (another pass for other bins).
      def overview(bins: Overview::BINS)
        @overviews ||= {}
        @overviews[bins] ||= Overview.new(duration_ns, bins: bins, lanes: @timeline.overview_lanes(bins))
      end

      # The intervals of every thread that overlap [start_ns, end_ns) (a moment, such as an exit,
      # counts when it falls in it), in time order (by start; threads in their order of
      # appearance on ties), at most +limit+: the first ones. So when +limit+ of them come back,
      # every interval that starts before the last one's start is among them.
      #
      # Each call is a pass over the trace: ask for several windows at once with #details.
      def detail(start_ns, end_ns, limit: 200_000) = @timeline.detail(start_ns, end_ns, limit: limit)

      # #detail of each window [start_ns, end_ns] (or [start_ns, end_ns, its own limit]), in one
      # pass over the trace.
      def details(windows, limit: 200_000) = @timeline.details(windows, limit: limit)

      # #details as Model::IntervalColumns (no object per interval): from the engine when the
      # timeline has them, else made of #details' intervals.
      def details_columns(windows, limit: 200_000)
        return @timeline.details_columns(windows, limit: limit) if @timeline.respond_to?(:details_columns)

        details(windows, limit: limit).map { |found| Model::IntervalColumns.of(found) }
      end

      def selected_threads
        threads = @timeline.threads.values
        @only_thread ? threads.select { |thread| Vocabulary.thread_named?(thread.label, @only_thread) } : threads
      end
    end
  end
end
