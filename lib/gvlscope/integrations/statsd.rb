# frozen_string_literal: true

require "socket"
require_relative "../recorder/metrics"
require_relative "../recorder/breakdown"
require_relative "../support/units"
require_relative "../recorder/fork"
require_relative "request_hooks"
require_relative "own_descriptor"

module GVLScope
  # GVL numbers to StatsD or DogStatsD (Datadog's agent) over UDP: a background thread sends,
  # every +every+ seconds, what happened since its previous flush.
  #
  #   GVLScope::StatsD.start(host: "127.0.0.1", port: 8125, every: 10, prefix: "gvlscope", tags: true)
  #
  # Process-wide (GVLScope::Metrics): gauges gvl.held_ratio (share of the interval some thread
  # held the GVL), waiting_threads (now), gvl.wait_p50_ms / gvl.wait_p99_ms (upper bounds of
  # the log2 buckets holding those quantiles of the interval's GVL waits); counters gvl.waits and
  # gvl.wait_ms. Per route and per job class (GVLScope::Breakdown): counters route.requests,
  # route.run_ms / gvl_wait_ms / idle_ms / gc_ms / duration_ms / pickup_wait_ms (job.executions and
  # job.* for jobs; run + gvl_wait + idle + gc = duration + pickup_wait, the GVL wait before the
  # request started), job.queue_latency_ms (time in the queue, enqueued_at to the start; the pickup
  # wait is part of it) and the gauges route.gvl_wait_p50_ms / _p99_ms. With tags: true the route, job class and queue are
  # DogStatsD tags (`|#route:UsersController#show`); with tags: false they go into the name
  # (`route.UsersController_show.requests`), for a plain StatsD. Sampled counts (a producer's
  # `sample:`) carry their rate (`|@0.1`), so the server scales them back.
  #
  # Never in the way of the app: UDP sends that would block are dropped (and counted), a server
  # that is down or a host that does not resolve gives one warning a minute. After fork the child
  # starts its own thread and socket, with its own numbers.
  class StatsD
    DEFAULTS = { host: "127.0.0.1", port: 8125, every: 10, prefix: "gvlscope", tags: true, logger: nil,
                 max_packet_bytes: 1432 }.freeze
    OWNER = "GVLScope::StatsD"
    # What a DogStatsD tag value may not hold: the line's separators and whitespace. (Datadog turns
    # other characters it does not keep, such as "#", into "_" itself.)
    TAG_UNSAFE = /[,|\s]/
    # A plain StatsD key: letters, digits, _ and -, the dots being ours.
    NAME_UNSAFE = /[^A-Za-z0-9_-]+/
    KIND_PREFIX = { route: "route", job: "job" }.freeze
    # What is counted, as in the Prometheus exposition: requests of a route, executions of a job class.
    KIND_COUNT = { route: "requests", job: "executions" }.freeze
    KIND_TAG = { route: "route", job: "job" }.freeze

    @lock = Mutex.new
    @running = nil

    class << self
      # Starts the flusher thread (and GVLScope::Metrics). One per process: GVLScope::Error if one
      # runs. Bad options raise GVLScope::Error here, never later.
      def start(**options)
        @lock.synchronize do
          raise Error, "#{OWNER}: already running (GVLScope::StatsD.stop first)" if @running

          @running = new(**options).start
        end
      end

      # Stops the thread after a last flush. Returns false if none was running.
      def stop
        running = @lock.synchronize { @running.tap { @running = nil } }
        return false unless running

        running.stop
        true
      end

      def running? = !@running.nil?

      # The running exporter (for #flush, #sent, #dropped), or nil.
      def current = @running

      private

      def restart_in_child
        @lock = Mutex.new
        @running&.restart_in_child
      end
    end

    attr_reader :sent_datagrams, :dropped_datagrams, :options

    def initialize(**options)
      Options.reject_unknown!(options, DEFAULTS.keys, OWNER)
      @options = DEFAULTS.merge(options)
      validate!
      @host, @port, @every, @tags = @options.values_at(:host, :port, :every, :tags)
      @prefix = @options[:prefix].empty? ? "" : "#{@options[:prefix]}."
      logger = @options[:logger]
      @warning = RequestHooks::Warning.new { |line| logger ? logger.warn(line) : Kernel.warn(line) }
      @sent_datagrams = 0
      @dropped_datagrams = 0
      @stop_lock = Mutex.new
      @wake = ConditionVariable.new
      @flush_lock = Mutex.new # the thread and a caller of #flush
      reset_state
    end

    # Starts the thread (Metrics on). Returns self.
    def start
      Metrics.enable
      reset_state
      # The first interval starts now: what happened before is not this exporter's to send.
      @flush_lock.synchronize { lines_now }
      @stopping = false
      @thread = Thread.new do
        Thread.current.name = "gvlscope statsd"
        Thread.current.report_on_exception = false
        run
      end
      self
    end

    def stop
      @stop_lock.synchronize do
        @stopping = true
        @wake.signal
      end
      @thread&.join(5)
      close_socket
    end

    # Sends what happened since the previous flush now; returns the lines sent. Called by the
    # thread; tests and at-exit hooks may call it too. Never raises.
    def flush
      @flush_lock.synchronize do
        lines = lines_now
        send_lines(lines)
        lines
      end
    rescue StandardError => e
      warn_once("could not flush: #{e.class}: #{e.message}")
      []
    end

    # The lines for the interval since the previous call, as they go on the wire (and the state
    # moves on to now).
    def lines_now
      snapshot = Metrics.enabled? ? Metrics.snapshot : nil
      lines = []
      if snapshot
        process_lines(lines, @previous ? snapshot - @previous : snapshot)
        @previous = snapshot
      end
      entries = Breakdown.snapshot
      entries.each { |entry| entry_lines(lines, entry, @previous_entries[entry.key]) }
      @previous_entries = entries.to_h { |entry| [entry.key, entry] }
      lines
    end

    # In a forked child: the parent's thread and socket are not ours; start again from zero.
    def restart_in_child
      @flush_lock = Mutex.new
      @stop_lock = Mutex.new
      @wake = ConditionVariable.new
      @socket = nil
      start unless @stopping
    end

    private

    def validate!
      host, port, every, prefix, tags, size = @options.values_at(:host, :port, :every, :prefix, :tags, :max_packet_bytes)
      raise Error, "#{OWNER}: host must be a non-empty String, got #{host.inspect}" unless host.is_a?(String) && !host.empty?
      unless port.is_a?(Integer) && port.between?(1, 65_535)
        raise Error, "#{OWNER}: port must be an Integer in 1..65535, got #{port.inspect}"
      end
      raise Error, "#{OWNER}: every must be a number of seconds > 0, got #{every.inspect}" unless every.is_a?(Numeric) && every.positive?
      unless prefix.is_a?(String) && prefix.match?(/\A[A-Za-z0-9_.-]*\z/) && !prefix.start_with?(".") && !prefix.end_with?(".")
        raise Error, "#{OWNER}: prefix must be a String of letters, digits, _, - and inner dots, got #{prefix.inspect}"
      end
      raise Error, "#{OWNER}: tags must be true or false, got #{tags.inspect}" unless [true, false].include?(tags)
      return if size.is_a?(Integer) && size.between?(64, 65_000)

      raise Error, "#{OWNER}: max_packet_bytes must be an Integer in 64..65000, got #{size.inspect}"
    end

    def reset_state
      @previous = nil
      @previous_entries = {}
    end

    def run
      loop do
        @stop_lock.synchronize { @wake.wait(@stop_lock, @every) unless @stopping }
        flush
        break if @stopping
      end
    end

    def process_lines(lines, interval)
      waits = interval.wait_histogram
      lines << line("gvl.held_ratio", format("%.4f", interval.held_ratio), "g")
      lines << line("waiting_threads", interval.waiting_threads, "g")
      lines << line("gvl.waits", waits.sum, "c")
      lines << line("gvl.wait_ms", ms(interval.wait_ns), "c")
      quantile_lines(lines, "gvl.wait", waits)
    end

    # Only series that moved in the interval are sent: an idle route sends nothing.
    def entry_lines(lines, entry, before)
      count = entry.count - (before ? before.count : 0)
      return unless count.positive?

      base = KIND_PREFIX.fetch(entry.kind)
      tags = nil
      if @tags
        tags = "|##{KIND_TAG.fetch(entry.kind)}:#{tag_value(entry.label)}"
        entry.tags.each { |key, value| tags << ",#{tag_value(key)}:#{tag_value(value)}" }
      else
        base = [base, name_part(entry.label), *entry.tags.values.map { |value| name_part(value) }].join(".")
      end
      # A sampled series: the server multiplies counters by 1/rate.
      rate = entry.sample_rate < 1.0 ? "|@#{entry.sample_rate}" : ""
      lines << line("#{base}.#{KIND_COUNT.fetch(entry.kind)}", count, "c", rate, tags)
      { run_ms: :run_ns, gvl_wait_ms: :wait_ns, idle_ms: :idle_ns, gc_ms: :gc_ns, duration_ms: :duration_ns,
        pickup_wait_ms: :pickup_wait_ns, queue_latency_ms: :queue_latency_ns, loop_wait_ms: :loop_wait_ns }.each do |name, field|
        next if field == :queue_latency_ns && entry.kind != :job
        next if field == :loop_wait_ns && entry.loop_wait_ns.zero? # requests on event loops' tasks (Falcon) only

        lines << line("#{base}.#{name}", ms(entry[field] - (before ? before[field] : 0)), "c", rate, tags)
      end
      buckets = before ? entry.wait_buckets.zip(before.wait_buckets).map { |now, earlier| now - earlier } : entry.wait_buckets
      quantile_lines(lines, "#{base}.gvl_wait", buckets, tags)
    end

    def quantile_lines(lines, base, buckets, tags = nil)
      { p50: 0.5, p99: 0.99 }.each do |name, q|
        bucket = Log2.quantile_bucket(buckets, q) or next
        # The bucket's upper bound, as the Puma plugin's log line: bucket b holds [2^(b-1), 2^b).
        lines << line("#{base}_#{name}_ms", ms(bucket.zero? ? 0 : 2**bucket), "g", "", tags)
      end
    end

    def line(name, value, type, rate = "", tags = nil) = "#{@prefix}#{name}:#{value}|#{type}#{rate}#{tags}"

    # Milliseconds with up to 3 decimals (microseconds), no trailing zeros: "12.5", "0.004", "3".
    def ms(ns)
      text = format("%.3f", ns / 1e6)
      text.sub!(/\.?0+\z/, "")
      text
    end

    def tag_value(value) = value.to_s.gsub(TAG_UNSAFE, "_")

    def name_part(value)
      part = value.to_s.gsub(NAME_UNSAFE, "_").gsub(/\A_+|_+\z/, "")
      part.empty? ? "_" : part
    end

    # Lines packed into datagrams of at most max_packet_bytes (one line per datagram if longer).
    def send_lines(lines)
      limit = @options[:max_packet_bytes]
      packet = +""
      lines.each do |text|
        if !packet.empty? && packet.bytesize + 1 + text.bytesize > limit
          send_packet(packet)
          packet = +""
        end
        packet << "\n" unless packet.empty?
        packet << text
      end
      send_packet(packet) unless packet.empty?
    end

    def send_packet(packet)
      close_socket if @socket && !OwnDescriptor.ours?(@socket) # the program closed it: a socket of our own again
      socket = @socket ||= connect
      # Non-blocking: a full socket buffer drops this datagram rather than stall anything.
      if socket.sendmsg_nonblock(packet, 0, exception: false) == :wait_writable
        @dropped_datagrams += 1
      else
        @sent_datagrams += 1
      end
    rescue SystemCallError, IOError, SocketError => e
      @dropped_datagrams += 1
      # Refused: the ICMP answer to an earlier datagram; the socket stays usable. Otherwise
      # (resolution, no route) try again from scratch next time.
      close_socket unless e.is_a?(Errno::ECONNREFUSED)
      warn_once("cannot send to #{@host}:#{@port}: #{e.message} (datagrams dropped: #{@dropped_datagrams})")
    end

    def warn_once(message) = @warning.warn("gvlscope: #{OWNER}: #{message}")

    def connect
      address = Addrinfo.udp(@host, @port)
      socket = UDPSocket.new(address.afamily)
      socket.connect(address.ip_address, @port)
      OwnDescriptor.hide(socket)
    rescue StandardError
      socket&.close
      raise
    end

    def close_socket
      OwnDescriptor.close(@socket) if @socket
    rescue IOError
      nil
    ensure
      @socket = nil
    end
  end

  after_fork { StatsD.__send__(:restart_in_child) }
end
