# frozen_string_literal: true

module GVLScope
  # Prometheus text exposition (format 0.0.4) of a Metrics::Snapshot. Metric names live under
  # gvlscope_; times are in seconds as Prometheus expects; histograms are cumulative with
  # power-of-two bucket bounds.
  module Prometheus
    module_function

    def exposition(snapshot, **labels)
      base = label_text(labels)
      out = +""
      counter(out, "gvlscope_wall_seconds_total", "Wall time covered by these metrics", base, snapshot.wall_ns / 1e9)
      counter(out, "gvlscope_gvl_held_seconds_total", "Time some thread held the GVL", base, snapshot.held_ns / 1e9)
      counter(out, "gvlscope_gvl_wait_seconds_total", "Time threads spent waiting for the GVL", base, snapshot.wait_ns / 1e9)
      gauge(out, "gvlscope_gvl_held_ratio", "Share of wall time the GVL was held", base, snapshot.held_ratio)
      gauge(out, "gvlscope_waiting_threads", "Threads waiting for the GVL now", base, snapshot.waiting_threads)
      counter(out, "gvlscope_gvl_acquisitions_total", "Times a thread acquired the GVL after waiting", base, snapshot.acquisitions)
      out << "# HELP gvlscope_gvl_releases_total GVL releases by cause\n# TYPE gvlscope_gvl_releases_total counter\n"
      { blocking: snapshot.released_blocking, preempted: snapshot.released_preempted,
        exit: snapshot.released_exit }.each do |cause, count|
        out << "gvlscope_gvl_releases_total#{label_text(labels.merge(cause: cause))} #{count}\n"
      end
      histogram(out, "gvlscope_gvl_hold_seconds", "GVL hold durations", labels, snapshot.hold_histogram, 1e-9)
      histogram(out, "gvlscope_gvl_wait_seconds", "Waits for the GVL", labels, snapshot.wait_histogram, 1e-9)
      histogram(out, "gvlscope_waiters_at_acquire", "Threads still waiting when one acquired the GVL", labels,
                snapshot.waiters_at_acquire_histogram, 1)
      out
    end

    def counter(out, name, help, labels, value)
      out << "# HELP #{name} #{help}\n# TYPE #{name} counter\n#{name}#{labels} #{number(value)}\n"
    end

    def gauge(out, name, help, labels, value)
      out << "# HELP #{name} #{help}\n# TYPE #{name} gauge\n#{name}#{labels} #{number(value)}\n"
    end

    # Bucket b holds [2^(b-1), 2^b): its upper bound (le) is 2^b - 1 for integers, so we write
    # le = 2^b * unit, which bounds every value in it.
    def histogram(out, name, help, labels, counts, unit)
      out << "# HELP #{name} #{help}\n# TYPE #{name} histogram\n"
      last = counts.rindex(&:positive?) || 0
      cumulative = 0
      sum = 0.0
      (0..last).each do |bucket|
        cumulative += counts[bucket]
        lower = bucket.zero? ? 0 : 2**(bucket - 1)
        sum += counts[bucket] * lower * unit
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
