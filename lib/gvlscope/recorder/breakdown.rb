# frozen_string_literal: true

require_relative "../support/errors"
require_relative "../support/units"
require_relative "native"
require_relative "fork"
require_relative "../support/counters"

module GVLScope
  # Process-wide GVL numbers per route (GVLScope::Rack) and per job class (GVLScope::Sidekiq):
  # how many requests/jobs, and the sums of their run / GVL wait / idle / GC time and duration,
  # with a log2 histogram of their GVL waits. Exporters (Prometheus /metrics, OpenTelemetry,
  # StatsD) read #snapshot.
  #
  #   GVLScope::Breakdown.record(:route, "UsersController#show", timing)
  #   GVLScope::Breakdown.record(:job, "HardJob", timing, { queue: "default" })
  #   GVLScope::Breakdown.snapshot # => [#<struct Entry kind=:route, label="UsersController#show", ...>]
  #
  # Cardinality is bounded: at most max_labels series (label + tags) per kind; past it, new ones
  # are added together under the label "other" with no tags. Counters are totals since the
  # process started (or forked: a child starts empty) and only grow.
  #
  # With sampling (a producer's `sample:` below 1.0) only sampled requests/jobs are recorded:
  # count and sums are of the sampled ones, and each Entry carries the sample_rate it was
  # recorded with, so count / sample_rate estimates the real number.
  module Breakdown
    KINDS = %i[route job].freeze
    OTHER = "other"
    NO_TAGS = {}.freeze
    DEFAULT_MAX_LABELS = 100
    MAX_IDENTITIES = 8 # tags objects remembered per label: a producer making a new Hash per call is not
    BUCKETS = Log2::BUCKETS

    # What a series' to_a holds, in order (Native::BreakdownSeries, ext/gvlscope/breakdown.c, which
    # names them once: a request is added in one C call, atomic under the GVL, so adding takes no
    # lock): the count, the sums of a request's values, the sample rate, then the wait buckets.
    FIELDS = Native::BreakdownSeries::FIELDS
    SUMS = (FIELDS - [:sample_rate]).freeze
    RATE = FIELDS.index(:sample_rate)
    FIRST_BUCKET = FIELDS.size

    # One series: totals since start. duration_ns: the app call / the job (as RequestTiming's);
    # wait_ns includes pickup_wait_ns, the wait for the GVL before the request/job started (see
    # RequestTiming), so run + wait + idle + gc = duration + pickup_wait (to the clock's
    # resolution). io_overlap_wait_ns: the part of wait_ns that IO the request/job had started
    # overlapped (docs/metrics.md). queue_latency_ns: jobs' time in their queue, from enqueued_at
    # to the start (RequestTiming#queue_latency_ns; 0 for requests and for jobs that had none).
    # releases: the times their threads gave the GVL up (RequestTiming#releases; a count).
    # wait_buckets: Log2 buckets of each request's/job's GVL wait in ns (bucket 0 counts zero waits).
    Entry = Struct.new(:kind, :label, :tags, *SUMS, :wait_buckets, :sample_rate, keyword_init: true) do
      include Counters::Sums
      def wait_ms = wait_ns / 1e6
      def key = [kind, label, tags]

      # The same series of two processes (Puma workers) added together.
      def +(other)
        Entry.new(**to_h, **SUMS.to_h { |sum| [sum, self[sum] + other[sum]] },
                  wait_buckets: wait_buckets.zip(other.wait_buckets).map(&:sum).freeze).freeze
      end

      # Small and plain, to travel between processes: the histogram sparse.
      def pack
        [kind, label, tags, *SUMS.map { |sum| self[sum] }, sample_rate,
         wait_buckets.each_with_index.filter_map { |count, bucket| [bucket, count] if count.positive? }]
      end

      def self.unpack((kind, label, tags, *sums, sample_rate, buckets))
        wait_buckets = Array.new(BUCKETS, 0)
        buckets.each { |bucket, count| wait_buckets[bucket] = count }
        new(kind: kind, label: label, tags: tags, **SUMS.zip(sums).to_h, sample_rate: sample_rate,
            wait_buckets: wait_buckets.freeze).freeze
      end

      # Several processes' entries: one per series, added up.
      def self.add_up(entries)
        entries.group_by(&:key).map { |_, same| same.reduce(:+) }
      end
    end

    @lock = Mutex.new
    @max_labels = KINDS.to_h { |kind| [kind, DEFAULT_MAX_LABELS] }

    class << self
      # Adds one request/job. +timing+ is a finished GVLScope::RequestTiming, or answers the
      # values of FIELDS (run_ns, wait_ns, ...; one it does not answer counts 0); +tags+ (e.g.
      # { queue: "default" }) are part of the key; +sample_rate+ is the producer's (1.0 when
      # everything is recorded). Returns the series added to (GVLScope::Rack's Native::RackRequests keeps it).
      def record(kind, label, timing, tags = NO_TAGS, sample_rate = 1.0)
        # Found without the lock where the keys hash in C without calling Ruby: untagged series
        # (routes) by label, tagged ones by label and the very tags object a producer passed
        # before (Sidekiq's per-queue Hash), frozen. Anything else: under the lock.
        series = if tags.equal?(NO_TAGS) then @untagged[kind]&.[](label)
                 else @by_identity[kind]&.[](label)&.[](tags)
                 end
        series ||= series_for(kind, label, tags)
        series.add(timing, sample_rate)
      end

      # Every series, as frozen Entries (kinds in KINDS order, then labels in first-seen order).
      def snapshot
        rows = @lock.synchronize do
          @series.flat_map do |kind, labels|
            labels.flat_map { |label, by_tags| by_tags.map { |tags, series| [kind, label, tags, series.to_a] } }
          end
        end
        rows.map do |kind, label, tags, row|
          Entry.new(kind: kind, label: label, tags: tags, **SUMS.each_with_index.to_h { |sum, i| [sum, row[i]] },
                    wait_buckets: row[FIRST_BUCKET, BUCKETS].freeze, sample_rate: row[RATE]).freeze
        end
      end

      # max_labels: series per kind (both kinds); max_routes / max_jobs: one kind. Series already
      # recorded stay; the cap applies to new ones.
      def configure(**options)
        Options.reject_unknown!(options, %i[max_labels max_routes max_jobs], "GVLScope::Breakdown.configure")
        every = options[:max_labels]
        caps = { route: options[:max_routes] || every, job: options[:max_jobs] || every }.compact
        caps.each do |kind, cap|
          unless cap.is_a?(Integer) && cap >= 0
            raise Error, "GVLScope::Breakdown: max_labels must be an Integer >= 0, got #{cap.inspect} (for #{kind})"
          end
        end
        @lock.synchronize { @max_labels.merge!(caps) }
        Native::RackRequests.forget_all # a label once past the cap may now get its own series
        nil
      end

      def max_labels(kind) = @max_labels.fetch(kind)

      # Forgets every series and restores the default caps (tests).
      def reset!
        clear_series!
        @max_labels = KINDS.to_h { |kind| [kind, DEFAULT_MAX_LABELS] }
        nil
      end

      # Forgets the series only, keeping the caps (a forked child: its numbers are its own).
      def clear_series!
        @lock = Mutex.new # a forked child must not inherit a lock some parent thread held
        @series = KINDS.to_h { |kind| [kind, {}] }   # kind => label => tags => series
        @untagged = KINDS.to_h { |kind| [kind, {}] } # kind => label => its series with NO_TAGS
        @by_identity = KINDS.to_h { |kind| [kind, {}] } # kind => label => tags object (identity) => series
        @sizes = KINDS.to_h { |kind| [kind, 0] }
        Native::RackRequests.forget_all # they hold the old series
        nil
      end

      private

      # The series, found or made under the lock. Past the cap a new one is "other".
      def series_for(kind, label, tags)
        @lock.synchronize do
          by_label = @series.fetch(kind) do
            raise Error, "GVLScope::Breakdown: kind must be one of #{KINDS.inspect}, got #{kind.inspect}"
          end
          found = by_label[label]&.[](tags)
          next remember_identity(kind, label, tags, found) if found

          if @sizes[kind] >= @max_labels[kind]
            label = OTHER
            tags = NO_TAGS
            found = by_label[label]&.[](tags)
            next found if found
          else
            @sizes[kind] += 1
          end
          label = -label.to_s # frozen, deduplicated: a caller's mutable String must not change the key
          tags = tags.empty? ? NO_TAGS : (tags.frozen? ? tags : tags.dup.freeze)
          series = Native::BreakdownSeries.new
          @untagged[kind][label] = series if tags.equal?(NO_TAGS)
          remember_identity(kind, label, tags, series)
          (by_label[label] ||= {})[tags] = series
        end
      end

      def remember_identity(kind, label, tags, series)
        return series unless tags.frozen? && !tags.equal?(NO_TAGS)

        identities = (@by_identity[kind][label] ||= {}.compare_by_identity)
        identities[tags] = series if identities.size < MAX_IDENTITIES
        series
      end
    end

    clear_series!
  end

  after_fork { Breakdown.clear_series! }
end
