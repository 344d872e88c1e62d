# frozen_string_literal: true

require "net/http"
require "uri"
require_relative "../errors"
require_relative "snapshot"

module GVLScope
  module Live
    # Reads the Puma plugin's /metrics (formats/prometheus.rb's exposition) into a Live::Snapshot:
    # one WorkerRow per series (labels worker and pid; one series without labels when the plugin
    # sums its workers), the counters summed over them. A scrape has no per-thread rows and no
    # run/gc/idle split.
    class Scrape
      TIMEOUT = 3.0
      SERIES = {
        "gvlscope_wall_seconds_total" => :wall_ns, "gvlscope_gvl_held_seconds_total" => :held_ns,
        "gvlscope_gvl_wait_seconds_total" => :wait_ns, "gvlscope_waiting_threads" => :waiting_threads,
        "gvlscope_gvl_acquisitions_total" => :acquisitions
      }.freeze
      HISTOGRAMS = { "gvlscope_gvl_hold_seconds" => [:hold_histogram, 1e-9], "gvlscope_gvl_wait_seconds" => [:wait_histogram, 1e-9],
                     "gvlscope_waiters_at_acquire" => [:waiters_at_acquire_histogram, 1] }.freeze
      LINE = /\A(?<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?<labels>[^}]*)\})?\s+(?<value>\S+)/

      attr_reader :url

      def initialize(url)
        @url = URI.parse(url)
        raise Error, "not an http:// URL: #{url}" unless @url.scheme == "http" && @url.host
      rescue URI::InvalidURIError
        raise Error, "not a URL: #{url}"
      end

      # +stacks+ is accepted for Client's sake: a scrape has no threads.
      def snapshot(stacks: false) # rubocop:disable Lint/UnusedMethodArgument
        self.class.parse(get, time_ns: Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond))
      end

      def close; end

      def get
        response = Net::HTTP.start(@url.host, @url.port, open_timeout: TIMEOUT, read_timeout: TIMEOUT) do |http|
          http.get(@url.request_uri)
        end
        raise Error, "#{@url}: HTTP #{response.code} #{response.message.to_s.strip}" unless response.is_a?(Net::HTTPSuccess)

        response.body.to_s
      rescue SystemCallError, IOError, SocketError, Timeout::Error, Net::HTTPBadResponse => e
        raise Error, "cannot read #{@url}: #{e.message}"
      end

      # A Snapshot from an exposition's text; GVLScope::Error when it holds no gvlscope series.
      def self.parse(text, time_ns:)
        series = Hash.new { |hash, key| hash[key] = { histograms: Hash.new { |h, k| h[k] = {} } } }
        text.each_line do |line|
          next if line.start_with?("#")

          match = LINE.match(line) or next
          labels = labels_of(match[:labels])
          value = Float(match[:value], exception: false) or next
          identity = labels.slice("worker", "pid")
          if (field = SERIES[match[:name]])
            series[identity][field] = field.end_with?("_ns") ? (value * 1e9).round : value.round
          elsif match[:name] == "gvlscope_gvl_releases_total" && labels["cause"]
            (series[identity][:releases] ||= {})[labels["cause"].to_sym] = value.round
          elsif (histogram = histogram_of(match[:name], labels))
            series[identity][:histograms][histogram[0]][histogram[1]] = value.round
          end
        end
        series.select! { |_, numbers| numbers.key?(:wall_ns) }
        raise Error, "no gvlscope metrics in the answer (is it the Puma plugin's /metrics?)" if series.empty?

        build(series, time_ns)
      end

      def self.labels_of(text)
        return {} if text.nil? || text.empty?

        text.scan(/(\w+)="((?:[^"\\]|\\.)*)"/).to_h
      end

      # [histogram, bucket] for a _bucket line: le = 2^b * unit names bucket b.
      def self.histogram_of(name, labels)
        base = name.delete_suffix("_bucket")
        return nil if base == name || !HISTOGRAMS.key?(base) || labels["le"] == "+Inf"

        reader, unit = HISTOGRAMS[base]
        bound = Float(labels["le"], exception: false) or return nil
        [reader, bound <= 0 ? 0 : Math.log2(bound / unit).round]
      end

      def self.build(series, time_ns)
        workers = series.map do |identity, numbers|
          Snapshot::WorkerRow.new(worker: identity["worker"]&.to_i, pid: identity["pid"]&.to_i, wall_ns: numbers[:wall_ns],
                                  held_ns: numbers.fetch(:held_ns, 0), wait_ns: numbers.fetch(:wait_ns, 0),
                                  waiting_threads: numbers.fetch(:waiting_threads, 0)).freeze
        end
        sum = ->(field) { series.values.sum { |numbers| numbers.fetch(field, 0) } }
        histograms = HISTOGRAMS.values.to_h do |reader, _|
          [reader, decumulate(series.values.map { |numbers| numbers[:histograms][reader] })]
        end
        releases = Snapshot::RELEASE_CAUSES.to_h { |cause| [cause, series.values.sum { |n| n.dig(:releases, cause).to_i }] }
        Snapshot.new(
          source: "prometheus", pid: workers.size == 1 ? workers.first.pid : nil, time_ns: time_ns,
          processes: workers.size, wall_ns: sum[:wall_ns], held_ns: sum[:held_ns], wait_ns: sum[:wait_ns],
          acquisitions: sum[:acquisitions], waiting_threads: sum[:waiting_threads], releases: releases,
          workers: workers, **histograms
        )
      end

      # Prometheus buckets are cumulative; the snapshot's count each bucket alone, all series summed.
      def self.decumulate(per_series)
        counts = Array.new(Log2::BUCKETS, 0)
        per_series.each do |cumulative|
          previous = 0
          cumulative.sort.each do |bucket, total|
            counts[bucket] += total - previous if bucket < Log2::BUCKETS
            previous = total
          end
        end
        counts
      end
    end
  end
end
