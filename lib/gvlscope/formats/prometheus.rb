# frozen_string_literal: true

require_relative "format"
require_relative "../support/units"

module GVLScope
  module Formats
    # Prometheus text exposition (format 0.0.4) of Metrics::Snapshots. Metric names live under
    # gvlscope_; times are in seconds as Prometheus expects; histograms are cumulative with
    # power-of-two bucket bounds.
    #
    # The subject is a list of [snapshot, labels] series of the same metric families (one HELP/TYPE
    # per family), e.g. one per Puma worker, told apart by their labels. Each snapshot needs what
    # Metrics::Snapshot answers: wall_ns, held_ns, wait_ns, held_ratio, waiting_threads,
    # acquisitions, released_*, and the three histograms.
    #
    # breakdown: per-route and per-job series (GVLScope::Breakdown), a list of [entries, labels]
    # (one per process, labels as the snapshots'): for each route / job class and queue, a
    # request / job counter, the seconds of each state (run, wait, idle, gc: they add up to
    # duration + pickup wait), the duration and pickup wait, and a histogram of GVL waits; for jobs
    # also their queue latency (enqueued_at to start, which the pickup wait is part of).
    #
    # Event loops (a snapshot's loops, EventLoops::Turns): their turns, busy time and a histogram
    # of turn lengths, when some loop gave turns.
    class Prometheus < Format
      # Breakdown histograms share fixed buckets, so that series add up (sum by (le)): 2^b ns for
      # b in 14..33, 16 us to 8.6 s; shorter waits count in the first, longer in +Inf only.
      BREAKDOWN_BUCKETS = (14..33)
      BREAKDOWN_KINDS = {
        route: { prefix: "gvlscope_route", label: :route, counter: "requests", what: "Requests", one: "request" },
        job: { prefix: "gvlscope_job", label: :job, counter: "executions", what: "Job runs", one: "job run",
               queue_latency: true },
      }.freeze

      def self.exposition(snapshot, **labels) = exposition_of([[snapshot, labels]])
      def self.exposition_of(series, breakdown: []) = new(series, breakdown: breakdown).to_s

      def initialize(subject, breakdown: [])
        super(subject)
        @breakdown = breakdown
      end

      def write(out)
        write_process(out, @subject)
        BREAKDOWN_KINDS.each do |kind, names|
          series = @breakdown.flat_map do |entries, labels|
            entries.select { |e| e.kind == kind }.map { |e| [e, labels.merge(names[:label] => e.label, **tag_labels(e.tags))] }
          end
          write_breakdown(out, names, series) unless series.empty?
        end
        out
      end

      private

      def write_process(out, series)
        family(out, "gvlscope_wall_seconds_total", "counter", "Wall time covered by these metrics", series) { |s| s.wall_ns / 1e9 }
        family(out, "gvlscope_gvl_held_seconds_total", "counter", "Time some thread held the GVL", series) { |s| s.held_ns / 1e9 }
        family(out, "gvlscope_gvl_wait_seconds_total", "counter", "Time threads spent waiting for the GVL", series) { |s| s.wait_ns / 1e9 }
        family(out, "gvlscope_gvl_held_ratio", "gauge", "Share of wall time the GVL was held", series, &:held_ratio)
        family(out, "gvlscope_waiting_threads", "gauge", "Threads waiting for the GVL now", series, &:waiting_threads)
        family(out, "gvlscope_gvl_acquisitions_total", "counter", "Times a thread acquired the GVL after waiting", series,
               &:acquisitions)
        out << "# HELP gvlscope_gvl_releases_total GVL releases by cause\n# TYPE gvlscope_gvl_releases_total counter\n"
        series.each do |snapshot, labels|
          { blocking: snapshot.released_blocking, preempted: snapshot.released_preempted,
            exit: snapshot.released_exit }.each do |cause, count|
            out << "gvlscope_gvl_releases_total#{label_text(labels.merge(cause: cause))} #{count}\n"
          end
        end
        histogram_family(out, "gvlscope_gvl_hold_seconds", "GVL hold durations", series, :hold_histogram, 1e-9)
        histogram_family(out, "gvlscope_gvl_wait_seconds", "Waits for the GVL", series, :wait_histogram, 1e-9)
        histogram_family(out, "gvlscope_waiters_at_acquire", "Threads still waiting when one acquired the GVL", series,
                         :waiters_at_acquire_histogram, 1)
        write_event_loops(out, series)
        out
      end

      # Processes with event loops (Falcon, async: EventLoops) only: families of zeros say nothing elsewhere.
      def write_event_loops(out, series)
        loops = series.filter_map { |snapshot, labels| [snapshot.loops, labels] if snapshot.respond_to?(:loops) && snapshot.loops.turns.positive? }
        return if loops.empty?

        family(out, "gvlscope_event_loop_turns_total", "counter", "Turns event loops gave their fibers", loops, &:turns)
        family(out, "gvlscope_event_loop_busy_seconds_total", "counter", "Time event loops' fibers kept their threads",
               loops) { |turns| turns.busy_ns / 1e9 }
        histogram_family(out, "gvlscope_event_loop_turn_seconds",
                         "Turns of event loops' fibers: how late the loop came back to its select (event-loop delay)",
                         loops, :turn_histogram, 1e-9)
      end

      def write_breakdown(out, names, series)
        prefix = names[:prefix]
        family(out, "#{prefix}_#{names[:counter]}_total", "counter", "#{names[:what]} measured (sampled ones if sample < 1)",
               series, &:count)
        out << "# HELP #{prefix}_seconds_total Time of the threads that ran them by state " \
               "(run, wait for the GVL, idle, gc): duration + pickup wait\n# TYPE #{prefix}_seconds_total counter\n"
        series.each do |entry, labels|
          { run: entry.run_ns, wait: entry.wait_ns, idle: entry.idle_ns, gc: entry.gc_ns }.each do |state, ns|
            out << "#{prefix}_seconds_total#{label_text(labels.merge(state: state))} #{number(ns / 1e9)}\n"
          end
        end
        family(out, "#{prefix}_duration_seconds_total", "counter", "Duration of the #{names[:counter]}", series) { |e| e.duration_ns / 1e9 }
        family(out, "#{prefix}_pickup_wait_seconds_total", "counter",
               "GVL wait of their threads before they started (part of state wait)", series) { |e| e.pickup_wait_ns / 1e9 }
        # Requests on event loops' tasks (Falcon) only: a family of zeros says nothing elsewhere.
        if series.any? { |entry, _labels| entry.loop_wait_ns.positive? }
          family(out, "#{prefix}_loop_wait_seconds_total", "counter",
                 "Wait for their event loop (fiber servers: other fibers ran), apart from the GVL wait", series) do |e|
            e.loop_wait_ns / 1e9
          end
        end
        if names[:queue_latency]
          family(out, "#{prefix}_queue_latency_seconds_total", "counter",
                 "Time in their queue, from enqueued_at to the start (pickup wait is part of it)", series) do |e|
            e.queue_latency_ns / 1e9
          end
        end
        out << "# HELP #{prefix}_gvl_wait_seconds GVL wait per #{names[:one]}\n# TYPE #{prefix}_gvl_wait_seconds histogram\n"
        series.each { |entry, labels| fixed_histogram(out, "#{prefix}_gvl_wait_seconds", labels, entry) }
      end

      def fixed_histogram(out, name, labels, entry)
        counts = entry.wait_buckets
        cumulative = counts[0...BREAKDOWN_BUCKETS.first].sum
        BREAKDOWN_BUCKETS.each do |bucket|
          cumulative += counts[bucket]
          out << "#{name}_bucket#{label_text(labels.merge(le: number((2**bucket) * 1e-9)))} #{cumulative}\n"
        end
        out << "#{name}_bucket#{label_text(labels.merge(le: '+Inf'))} #{entry.count}\n"
        out << "#{name}_sum#{label_text(labels)} #{number(entry.wait_ns / 1e9)}\n"
        out << "#{name}_count#{label_text(labels)} #{entry.count}\n"
      end

      # Tags as label names Prometheus accepts.
      def tag_labels(tags)
        tags.to_h { |key, value| [key.to_s.gsub(/[^a-zA-Z0-9_]/, "_").to_sym, value] }
      end

      def family(out, name, type, help, series)
        out << "# HELP #{name} #{help}\n# TYPE #{name} #{type}\n"
        series.each { |snapshot, labels| out << "#{name}#{label_text(labels)} #{number(yield(snapshot))}\n" }
      end

      def histogram_family(out, name, help, series, reader, unit)
        out << "# HELP #{name} #{help}\n# TYPE #{name} histogram\n"
        series.each { |snapshot, labels| histogram(out, name, labels, snapshot.public_send(reader), unit) }
      end

      # Bucket b holds [2^(b-1), 2^b): its upper bound (le) is 2^b - 1 for integers, so we write
      # le = 2^b * unit, which bounds every value in it.
      def histogram(out, name, labels, counts, unit)
        last = counts.rindex(&:positive?) || 0
        cumulative = 0
        sum = 0.0
        (0..last).each do |bucket|
          cumulative += counts[bucket]
          sum += counts[bucket] * Log2.lower(bucket) * unit
          out << "#{name}_bucket#{label_text(labels.merge(le: number((2**bucket) * unit)))} #{cumulative}\n"
        end
        out << "#{name}_bucket#{label_text(labels.merge(le: '+Inf'))} #{cumulative}\n"
        out << "#{name}_sum#{label_text(labels)} #{number(sum)}\n"
        out << "#{name}_count#{label_text(labels)} #{cumulative}\n"
      end

      def label_text(labels)
        return "" if labels.empty?

        "{" + labels.map { |k, v| %(#{k}="#{v.to_s.gsub(/[\\"\n]/, "\\" => "\\\\", '"' => '\\"', "\n" => '\\n')}") }.join(",") + "}"
      end

      def number(value)
        value.is_a?(Float) ? format("%.9g", value) : value.to_s
      end
    end
  end
end
