# frozen_string_literal: true

require "net/http"
require "timeout"
require "zlib"
require "uri"
require_relative "../support/errors"
require_relative "snapshot"

module GVLScope
  module Live
    # Reads the Puma plugin's /metrics (formats/prometheus.rb's exposition) into a Live::Snapshot:
    # one WorkerRow per series (labels worker and pid; one series without labels when the plugin
    # sums its workers), the counters summed over them. A scrape has no per-thread rows and no
    # run/gc/idle split.
    class Scrape
      TIMEOUT = 3.0 # for connecting, and for each read
      DEADLINE = 10.0 # for the whole answer: a page trickled a byte per read would never end
      MAX_BODY_BYTES = 16 << 20 # the plugin's page is KBs; a huge one is not read into memory
      # A value beyond this (ns, or a count) is no number gvlscope writes: 2^63 ns is 292 years.
      MAX_VALUE = 2**63
      SERIES = {
        "gvlscope_wall_seconds_total" => :wall_ns, "gvlscope_gvl_held_seconds_total" => :held_ns,
        "gvlscope_gvl_wait_seconds_total" => :wait_ns, "gvlscope_waiting_threads" => :waiting_threads,
        "gvlscope_gvl_acquisitions_total" => :acquisitions
      }.freeze
      HISTOGRAMS = { "gvlscope_gvl_hold_seconds" => [:hold_histogram, 1e-9], "gvlscope_gvl_wait_seconds" => [:wait_histogram, 1e-9],
                     "gvlscope_waiters_at_acquire" => [:waiters_at_acquire_histogram, 1] }.freeze
      LINE = /\A(?<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?<labels>[^}]*)\})?\s+(?<value>\S+)/

      attr_reader :url

      # +deadline+: seconds for the whole answer (DEADLINE).
      def initialize(url, deadline: DEADLINE)
        @deadline = deadline
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
        # No class given: Net::HTTP rescues a Timeout::Error raised inside and asks again.
        Timeout.timeout(@deadline, nil, "no whole answer in #{format('%g', @deadline)} s") do
          Net::HTTP.start(@url.host, @url.port, open_timeout: TIMEOUT, read_timeout: TIMEOUT, max_retries: 0) do |http|
            http.request_get(@url.request_uri) { |response| return body_of(response) }
          end
        end
      rescue SystemCallError, IOError, SocketError, Timeout::Error, Net::HTTPBadResponse, Net::ProtocolError, Zlib::Error => e
        raise Error, "cannot read #{@url}: #{e.message}"
      end

      # The answer's body, read up to MAX_BODY_BYTES.
      def body_of(response)
        raise Error, "#{@url}: HTTP #{response.code} #{response.message.to_s.strip}" unless response.is_a?(Net::HTTPSuccess)

        body = String.new # binary: the bytes as they come
        response.read_body do |chunk|
          body << chunk
          raise Error, "#{@url}: the answer is over #{MAX_BODY_BYTES >> 20} MB (is it the Puma plugin's /metrics?)" if body.bytesize > MAX_BODY_BYTES
        end
        body
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
            series[identity][field] = whole(field.end_with?("_ns") ? value * 1e9 : value, match)
          elsif match[:name] == "gvlscope_gvl_releases_total" && labels["cause"]
            (series[identity][:releases] ||= {})[labels["cause"].to_sym] = whole(value, match)
          elsif (histogram = histogram_of(match[:name], labels))
            series[identity][:histograms][histogram[0]][histogram[1]] = whole(value, match)
          end
        end
        series.select! { |_, numbers| numbers.key?(:wall_ns) }
        raise Error, "no gvlscope metrics in the answer (is it the Puma plugin's /metrics?)" if series.empty?

        build(series, time_ns)
      end

      # A /metrics page saved to a file (`gvlscope diff` reads it): [its Snapshot, its breakdown].
      def self.read_file(path)
        text = File.read(path, mode: "rb").force_encoding(Encoding::UTF_8)
        raise Error, "#{path}: not a /metrics scrape (not UTF-8 text)" unless text.valid_encoding?

        begin
          [parse(text, time_ns: 0), breakdown(text)]
        rescue Error => e
          raise Error, "#{path}: #{e.message}"
        end
      end

      # The per-route and per-job series of an exposition (formats/prometheus.rb's gvlscope_route_*
      # and gvlscope_job_*), each summed over the workers: a Hash per route or job (and its other
      # labels, the tags) with kind ("route" or "job"), label, tags, count, run_ns, wait_ns,
      # idle_ns, gc_ns, duration_ns, pickup_wait_ns and wait_buckets: GVL wait per request (job
      # run), one count per bucket b of values up to 2^b ns (Log2's bounds: b 14 also holds the
      # shorter ones; BREAKDOWN_OVER holds those over the last bound, le="+Inf"). Empty when the
      # exposition has none (no GVLScope::Rack, GVLScope::Sidekiq).
      BREAKDOWN_STATES = %w[run wait idle gc].freeze
      BREAKDOWN_OVER = 34 # the +Inf bucket: after formats/prometheus.rb's last bound, 2^33 ns
      BREAKDOWN_SKIPPED_LABELS = %w[worker pid state le].freeze

      def self.breakdown(text)
        series = {}
        buckets = Hash.new { |hash, key| hash[key] = Hash.new { |h, k| h[k] = {} } }
        text.each_line do |line|
          next if line.start_with?("#")

          match = LINE.match(line) or next
          parts = match[:name].match(/\Agvlscope_(route|job)_(\w+)\z/) or next
          kind, rest = parts.captures
          labels = labels_of(match[:labels])
          label = labels[kind] or next
          value = Float(match[:value], exception: false) or next
          tags = labels.reject { |name, _| name == kind || BREAKDOWN_SKIPPED_LABELS.include?(name) }
          key = [kind, label, tags]
          entry = series[key] ||= { kind: kind, label: label, tags: tags, count: 0, run_ns: 0, wait_ns: 0, idle_ns: 0,
                                    gc_ns: 0, duration_ns: 0, pickup_wait_ns: 0 }
          case rest
          when "requests_total", "executions_total" then entry[:count] += whole(value, match)
          when "seconds_total"
            state = labels["state"]
            entry[:"#{state}_ns"] += whole(value * 1e9, match) if BREAKDOWN_STATES.include?(state)
          when "duration_seconds_total" then entry[:duration_ns] += whole(value * 1e9, match)
          when "pickup_wait_seconds_total" then entry[:pickup_wait_ns] += whole(value * 1e9, match)
          when "gvl_wait_seconds_bucket"
            bucket = breakdown_bucket(labels["le"]) or next
            buckets[key][labels.slice("worker", "pid")][bucket] = whole(value, match)
          end
        end
        series.map { |key, entry| entry.merge(wait_buckets: decumulate(buckets[key].values)) }
      end

      # The bucket of an le bound of a breakdown histogram: 2^b ns is b; "+Inf" is BREAKDOWN_OVER.
      def self.breakdown_bucket(le)
        return BREAKDOWN_OVER if le == "+Inf"

        bound = Float(le.to_s, exception: false) or return nil
        bucket = bound.positive? ? Math.log2(bound * 1e9) : Float::NAN
        bucket.finite? && bucket.round.between?(0, BREAKDOWN_OVER - 1) ? bucket.round : nil
      end

      # +value+ rounded; GVLScope::Error naming the line when it is no count (1e300, Inf, NaN, -1).
      def self.whole(value, match)
        return value.round if value.finite? && value >= 0 && value < MAX_VALUE

        raise Error, "#{match[:name]} is #{match[:value][0, 40].inspect} in the answer: not a count gvlscope writes"
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
        return [reader, 0] if bound <= 0

        # An le no bucket of ours has (1e400, 1e-300) is not gvlscope's: the line is left out.
        bucket = Math.log2(bound / unit)
        bucket.finite? && bucket.round.between?(0, Log2::BUCKETS - 1) ? [reader, bucket.round] : nil
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
