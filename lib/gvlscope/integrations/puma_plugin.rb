# frozen_string_literal: true

require_relative "../support/one_copy"
return if GVLScope::OneCopy.elsewhere?(File.expand_path("../..", __dir__), "gvlscope/integrations/puma_plugin") # a second copy of the gem: see one_copy.rb
require "socket"
require_relative "../recorder/metrics"
require_relative "../recorder/flight_recorder"
require_relative "../support/units"
require_relative "../recorder/breakdown"
require_relative "../support/counters"
require_relative "../formats/prometheus"
require_relative "metrics_server"
require_relative "own_descriptor"
require_relative "stats_line"

module GVLScope
  # What `plugin :gvlscope` does in Puma (lib/puma/plugin/gvlscope.rb is the thin Puma side).
  #
  # In every process that serves requests (each worker in cluster mode, the server in single
  # mode): metrics on, a reporter thread that logs GVL stats every log_interval seconds, and an
  # optional flight recorder. Counters restart in each forked worker, so a worker's numbers are its
  # own.
  #
  # /metrics (optional, loopback only): in cluster mode the master serves it. Each worker sends its
  # totals to the master once a second over a Unix datagram socket made before the workers fork;
  # the master answers scrapes from the latest totals, one series per worker (labels worker and
  # pid) or summed over workers. Why the master: one port for the whole server, and it survives
  # worker restarts. In single mode the server process serves its own numbers. The per-route
  # (and per-job, Sidekiq embedded in Puma) numbers of GVLScope::Breakdown travel the same way,
  # as many series a datagram as fit in MAX_DATAGRAM_BYTES. A report the master cannot read (cut,
  # garbled) or a worker cannot send (one series larger than a datagram) is counted in
  # gvlscope_puma_worker_reports_dropped_total, and the first one logged.
  class PumaPlugin
    OPTIONS = {
      log_interval: 60,             # seconds between log lines per worker; nil or 0: no lines
      prometheus_port: nil,         # serve /metrics on this loopback port (0: any free port)
      prometheus_host: "127.0.0.1", # must be a loopback address
      prometheus_per_worker: true,  # false: sum the workers into one series
      flight_recorder: nil,         # true or FlightRecorder.start options: one recorder per worker
      live: false,                  # true: each worker opens its live socket, for `gvlscope top PID`
    }.freeze
    # Puma itself traps USR2 (restart) and USR1 (phased restart) in every process; WINCH is free.
    FLIGHT_RECORDER_DEFAULTS = { signal: "WINCH" }.freeze
    REPORT_EVERY = 1.0 # seconds between a worker's reports to the master
    STALE_AFTER = 5.0  # a worker that has not reported for this long is gone
    MAX_DATAGRAM_BYTES = 1 << 16 # what the master reads of a datagram; the rest of a longer one is lost
    DATAGRAM_HEADER_BYTES = 256  # room for a breakdown datagram's kind, index and pid around its series
    DROPPED = "gvlscope_puma_worker_reports_dropped_total"

    # The per-worker numbers that travel to the master and into the exposition.
    Totals = Struct.new(:wall_ns, :run_ns, :gc_ns, :wait_ns, :waiting_threads, :waits, :released_blocking,
                        :released_preempted, :released_exit, :hold_histogram, :wait_histogram,
                        :waiters_at_acquire_histogram) do
      def self.of(snapshot) = new(*members.map { |m| snapshot.public_send(m) })
      def self.zero = new(*members.map { |m| m.end_with?("histogram") ? [] : 0 })

      include Counters::Sums # held_ns
      def acquisitions = waits
      def held_ratio = Counters.ratio(held_ns, wall_ns)

      def +(other)
        Totals.new(*to_a.zip(other.to_a).map do |a, b|
          a.is_a?(Array) ? Array.new([a.size, b.size].max) { |i| a.fetch(i, 0) + b.fetch(i, 0) } : a + b
        end)
      end
    end

    # Workers summed into one series (prometheus_per_worker: false). Prometheus counters must never
    # go down, so the counters and histograms are those of every worker that ever reported
    # (restarted and silent ones included); the gauges are the live workers' own.
    Summed = Struct.new(:ever, :live) do
      (Totals.members - %i[waiting_threads]).each { |member| define_method(member) { ever.public_send(member) } }
      def held_ns = ever.held_ns
      def acquisitions = ever.acquisitions
      def waiting_threads = live.waiting_threads
      def held_ratio = live.held_ratio
    end

    # Options from the `gvlscope` line of the Puma config: GVLScope::Error, one line, when wrong.
    def self.validate(options)
      Options.reject_unknown!(options, OPTIONS.keys, "gvlscope (puma plugin)")

      options = OPTIONS.merge(options)
      interval = options[:log_interval]
      unless interval.nil? || (interval.is_a?(Numeric) && interval >= 0)
        raise Error, "gvlscope (puma plugin): log_interval must be a number of seconds >= 0 or nil, got #{interval.inspect}"
      end
      recorder = options[:flight_recorder]
      unless recorder.nil? || recorder == false || recorder == true || recorder.is_a?(Hash)
        raise Error, "gvlscope (puma plugin): flight_recorder must be true or a Hash, got #{recorder.inspect}"
      end
      unless [true, false].include?(options[:live])
        raise Error, "gvlscope (puma plugin): live must be true or false, got #{options[:live].inspect}"
      end
      options
    end

    attr_reader :options, :metrics_server

    def initialize(options, log:, clustered:)
      @options = self.class.validate(options)
      @log = log
      @clustered = clustered
      @workers = {} # index => [pid, Totals, reported_at, {key => Breakdown::Entry}, unsent]: the last report at each index
      @departed = nil # the final Totals of workers replaced at their index (restarts), summed
      @departed_breakdown = [] # and their Breakdown entries, added up
      @dropped = 0 # reports the master could not read
      @departed_unsent = 0 # series that restarted workers could not send
      @unsent = 0 # in a worker: series too large to send (each totals report carries the count so far)
      @workers_lock = Mutex.new
      recorder = @options[:flight_recorder]
      @recorder_options = recorder && FLIGHT_RECORDER_DEFAULTS.merge(recorder == true ? {} : recorder)
      # Checked now, in the master, so a bad directory or signal stops the boot, not a worker.
      FlightRecorder.validate(**@recorder_options) if @recorder_options
      @metrics_server = start_metrics_server if @options[:prometheus_port]
    end

    # Cluster mode, in the master, before any worker forks: open the reporting channel.
    def before_workers
      @inbox, @outbox = UNIXSocket.pair(:DGRAM).map { |io| OwnDescriptor.hide(io) }
      @receiver = Thread.new do
        Thread.current.name = "gvlscope workers"
        loop do
          break OwnDescriptor.close(@inbox) unless OwnDescriptor.ours?(@inbox) # never read the program's
          message, _, flags = @inbox.recvmsg(MAX_DATAGRAM_BYTES)
          receive(message, truncated: flags.anybits?(Socket::MSG_TRUNC))
        end
      rescue IOError, SystemCallError
        nil
      end
    end

    # In each worker (cluster) or the server process (single), before requests are served.
    def serve_here(index)
      if @clustered
        @metrics_server&.close_inherited
        OwnDescriptor.close(@inbox) if @inbox
      end
      Metrics.enable
      start_flight_recorder
      start_live_server if @options[:live]
      @index = index
      Thread.new do
        Thread.current.name = "gvlscope reporter"
        report_loop
      end
    end

    def exposition
      if @clustered
        series, breakdown = worker_series
      else
        series = [[Totals.of(Metrics.snapshot), { pid: Process.pid }]]
        breakdown = [[Breakdown.snapshot, { pid: Process.pid }]]
      end
      text = Formats::Prometheus.exposition_of(series, breakdown: breakdown)
      return text unless @clustered

      text + "# HELP #{DROPPED} Workers' reports the master could not read (cut, garbled) or a worker could not " \
             "send (a series too large)\n# TYPE #{DROPPED} counter\n#{DROPPED} #{dropped_reports}\n"
    end

    # One log line for an interval (a Snapshot difference).
    def self.log_line(interval, index:)
      StatsLine.for(interval, index ? "worker #{index} (pid #{Process.pid})" : "pid #{Process.pid}")
    end

    private

    def start_flight_recorder
      return unless @recorder_options
      return if FlightRecorder.running? # a preloaded master's recorder, restarted after fork

      FlightRecorder.start(**@recorder_options)
    rescue Error => e
      @log.call("gvlscope: flight recorder not started: #{e.message}")
    end

    def start_live_server
      require_relative "live_server"
      server = LiveServer.start
      @log.call("gvlscope: live GVL numbers of pid #{Process.pid}: gvlscope top #{Process.pid} (#{server.path})")
    rescue Error => e
      @log.call("gvlscope: live socket not opened: #{e.message}")
    end

    def start_metrics_server
      server = MetricsServer.new(host: @options[:prometheus_host], port: @options[:prometheus_port]) { exposition }
      server.start
      @log.call("gvlscope: GVL metrics on http://#{@options[:prometheus_host]}:#{server.port}/metrics")
      server
    end

    def report_loop
      interval = @options[:log_interval].to_f
      last_log = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      previous = Metrics.snapshot
      loop do
        sleep(@outbox ? REPORT_EVERY : [interval, REPORT_EVERY].max)
        snapshot = Metrics.snapshot
        send_totals(snapshot) if @outbox
        now = Process.clock_gettime(Process::CLOCK_MONOTONIC)
        next unless interval.positive? && now - last_log >= interval

        @log.call(self.class.log_line(snapshot - previous, index: @index))
        previous = snapshot
        last_log = now
      end
    rescue StandardError => e
      @log.call("gvlscope: reporter stopped: #{e.class}: #{e.message}")
    end

    # Totals are totals, not increments: a lost datagram only leaves the master a second behind.
    def send_totals(snapshot)
      return unless OwnDescriptor.ours?(@outbox) # never write into a descriptor the program took

      @outbox.send(Marshal.dump([@index, Process.pid, Totals.of(snapshot).to_a, @unsent]), 0)
      breakdown_datagrams(Breakdown.snapshot) { |message| @outbox.send(message, 0) }
    rescue IOError, SystemCallError
      nil # the master is gone or busy; the next report will do
    end

    # The series packed into datagrams the master reads whole, sliced by their size (labels and
    # tags have any length). A series too large to travel alone is counted in @unsent instead.
    def breakdown_datagrams(entries)
      budget = MAX_DATAGRAM_BYTES - DATAGRAM_HEADER_BYTES
      batch = []
      batch_bytes = 0
      entries.each do |entry|
        packed = entry.pack
        # Alone it is at least as large as in a batch (a batch shares symbols and the format's header).
        bytes = Marshal.dump(packed).bytesize
        next @unsent += 1 if bytes > budget

        if batch_bytes + bytes > budget
          yield Marshal.dump([:breakdown, @index, Process.pid, batch])
          batch = []
          batch_bytes = 0
        end
        batch << packed
        batch_bytes += bytes
      end
      yield Marshal.dump([:breakdown, @index, Process.pid, batch]) unless batch.empty?
    end

    def receive(message, truncated: false)
      return dropped("#{MAX_DATAGRAM_BYTES} bytes read of a longer datagram") if truncated

      report = Marshal.load(message) # rubocop:disable Security/MarshalLoad -- from our own workers
      now = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      @workers_lock.synchronize do
        if report.first == :breakdown
          _, index, pid, packed = report
          worker = worker_at(index, pid, now)
          packed.each do |fields|
            entry = Breakdown::Entry.unpack(fields)
            worker[3][entry.key] = entry
          end
        else
          index, pid, numbers, unsent = report
          worker = worker_at(index, pid, now)
          worker[1] = Totals.new(*numbers)
          worker[4] = unsent.to_i
        end
      end
    rescue StandardError => e
      dropped("#{e.class}: #{e.message}")
    end

    # A report lost: counted, and the first one logged (the count is in every scrape).
    def dropped(why)
      first = @workers_lock.synchronize { (@dropped += 1) == 1 }
      @log.call("gvlscope: a worker's report to the master was dropped (#{why}); #{DROPPED} counts them") if first
      nil
    end

    # The master's own count and each worker's series it could not send (restarted workers' kept).
    def dropped_reports
      @workers_lock.synchronize { @dropped + @departed_unsent + @workers.each_value.sum { |worker| worker[4] } }
    end

    # The worker at +index+ (under @workers_lock), reporting now. A new pid at an index: the worker
    # there restarted, and its last totals are final.
    def worker_at(index, pid, now)
      previous_pid, previous, _, previous_breakdown = @workers[index]
      if previous_pid != pid
        @departed = @departed ? @departed + previous : previous if previous
        @departed_breakdown = Breakdown::Entry.add_up(@departed_breakdown + previous_breakdown.values) if previous_breakdown
        @departed_unsent += @workers[index][4] if @workers[index]
        @workers[index] = [pid, Totals.zero, now, {}, 0]
      end
      @workers[index].tap { |worker| worker[2] = now }
    end

    # A worker silent for STALE_AFTER seconds is not shown (nor in the gauges), but its totals stay
    # in the summed counters: it may be gone for good, or only slow, and will report again.
    # Returns [process series, breakdown series] for the exposition.
    def worker_series
      now = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      workers, departed, departed_breakdown = @workers_lock.synchronize do
        [@workers.sort.map { |index, (pid, totals, at, breakdown)| [index, [pid, totals, at, breakdown.values]] }, @departed,
         @departed_breakdown]
      end
      live = workers.filter_map { |index, (pid, totals, at, breakdown)| [index, pid, totals, breakdown] if now - at <= STALE_AFTER }
      if @options[:prometheus_per_worker]
        [live.map { |index, pid, totals, _| [totals, { worker: index, pid: pid }] },
         live.map { |index, pid, _, breakdown| [breakdown, { worker: index, pid: pid }] }]
      elsif workers.empty?
        [[], []]
      else
        ever = workers.map { |_, (_, totals, _, _)| totals }.push(departed).compact.reduce(:+)
        entries = Breakdown::Entry.add_up(workers.flat_map { |_, (_, _, _, breakdown)| breakdown } + departed_breakdown)
        [[[Summed.new(ever, live.map { |_, _, totals, _| totals }.reduce(Totals.zero, :+)), {}]], [[entries, {}]]]
      end
    end
  end
end
