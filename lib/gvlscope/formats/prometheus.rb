# frozen_string_literal: true

require_relative "format"
require_relative "../units"

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
    class Prometheus < Format
      def self.exposition(snapshot, **labels) = exposition_of([[snapshot, labels]])
      def self.exposition_of(series) = new(series).to_s

      def write(out)
        series = @subject
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
        out
      end

      private

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
