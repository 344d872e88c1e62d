# frozen_string_literal: true

require_relative "../errors"
require_relative "../model/scan"
require_relative "thread_stats"
require_relative "histograms"
require_relative "blame"
require_relative "code_locations"
require_relative "overview"
require_relative "rules"

module GVLScope
  module Analysis
    # What the GVL did in one trace, and why: per-thread totals, GVL held % per Ractor, log2
    # histograms and findings (Analysis::RULES), each with evidence and a suggested fix. The
    # formats ReportText, ReportJSON and ReportHTML show it.
    class Report
      attr_reader :timeline, :stats, :only_thread

      # +timeline+: a Model::Timeline, or a Model::Scan (the native engine's pass: the same
      # answers, no intervals kept). +thread+: a thread label (or a name several threads share);
      # the table and findings then show only that thread (those threads).
      def initialize(timeline, thread: nil)
        @timeline = timeline
        @stats = ThreadStats.new(timeline)
        @only_thread = thread
        if thread && @stats.rows.none? { |row| Vocabulary.thread_named?(row.label, thread) }
          raise Error, "no thread named #{thread.inspect} in #{timeline.file.path} " \
                       "(threads: #{@stats.rows.map(&:label).uniq.join(', ')})"
        end
      end

      # Built only when a finding needs to say who held the GVL: it is a pass over every interval.
      def blame = @blame ||= Blame.new(@timeline)

      # What `gvlscope advise` answers on this trace (an Advisor::Advice, with its defaults), or why
      # it has none (a String): the findings whose fix is a thread count quote it, so the two agree.
      def advice
        return @advice if defined?(@advice)

        require_relative "advisor_inputs"
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

      # The whole trace in +bins+ slices per thread (Analysis::Overview): what the HTML report draws
      # zoomed out.
      # From a Model::Scan: the lanes the engine summed in its pass (another pass for other bins).
      def overview(bins: Overview::BINS)
        @overviews ||= {}
        @overviews[bins] ||= if @timeline.is_a?(Model::Scan)
                               Overview.new(duration_ns, bins: bins, lanes: @timeline.overview_lanes(bins))
                             else
                               Overview.of(@timeline, bins: bins)
                             end
      end

      # The intervals of every thread that overlap [start_ns, end_ns) (a moment, such as an exit,
      # counts when it falls in it), in time order (by start; threads in their order of
      # appearance on ties), at most +limit+: the first ones. So when +limit+ of them come back,
      # every interval that starts before the last one's start is among them.
      #
      # From a Model::Scan each call is a pass over the trace: ask for several windows at once with
      # #details.
      def detail(start_ns, end_ns, limit: 200_000)
        return @timeline.detail(start_ns, end_ns, limit: limit) if @timeline.is_a?(Model::Scan)

        found = []
        threads = @timeline.threads.size
        rank = {}
        @timeline.each_thread do |thread|
          rank[thread.serial] = rank.size
          intervals = thread.intervals
          # A thread's intervals follow one another: their ends are in order.
          first = intervals.bsearch_index { |interval| interval.end_ns > start_ns || interval.start_ns >= start_ns }
          next unless first

          taken = 0
          intervals[first..].each do |interval|
            break if interval.start_ns >= end_ns || taken == limit # the first +limit+ of all are among each's first

            found << interval
            taken += 1
          end
        end
        # One Integer a key (no Array per interval): by start, a moment (started, exited) before
        # what starts with it, then the thread's rank.
        found.sort_by! do |interval|
          ((2 * interval.start_ns + (interval.end_ns > interval.start_ns ? 1 : 0)) * threads) + rank[interval.thread]
        end
        found.first(limit)
      end

      # #detail of each window [start_ns, end_ns] (or [start_ns, end_ns, its own limit]), in one
      # pass over a Model::Scan's trace.
      def details(windows, limit: 200_000)
        return @timeline.details(windows, limit: limit) if @timeline.is_a?(Model::Scan)

        windows.map { |start_ns, end_ns, own| detail(start_ns, end_ns, limit: own || limit) }
      end

      def selected_threads
        threads = @timeline.threads.values
        @only_thread ? threads.select { |thread| Vocabulary.thread_named?(thread.label, @only_thread) } : threads
      end
    end
  end
end
