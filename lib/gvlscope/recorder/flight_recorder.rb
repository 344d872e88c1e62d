# frozen_string_literal: true

require "fileutils"
require "tempfile"
require_relative "native"
require_relative "trace"
require_relative "fork"
require_relative "../support/units"

module GVLScope
  # Keeps the last few seconds of GVL events in memory (a bounded ring: ext/gvlscope/sink_ring.c)
  # and writes them to a .gvl file when something went wrong: a slow request (GVLScope::Rack), a
  # signal, or a call to dump. The file opens in `gvlscope summary` and `gvlscope export` like any
  # trace, starting `seconds` before the dump.
  #
  #   GVLScope::FlightRecorder.start(seconds: 10, dir: "tmp/gvlscope")
  #   GVLScope::FlightRecorder.dump("checkout was slow")  # => path, or nil (rate-limited)
  #   GVLScope::FlightRecorder.stop
  #
  # Only one of a trace (GVLScope.start) and the flight recorder runs at a time: they share the
  # event lanes. In a forked child (Puma worker) and in a daemon (Process.daemon) the recorder
  # restarts with the same options.
  module FlightRecorder
    DEFAULT_BUFFER_BYTES = 32 * 1024 * 1024
    DEFAULTS = { seconds: 10, dir: "tmp/gvlscope", buffer_bytes: DEFAULT_BUFFER_BYTES, min_interval: 60,
                 signal: "USR2", logger: nil, keep: 20, keep_bytes: nil, stacks: true }.freeze
    DUMP_GLOB = "gvlscope-flight-*.gvl"
    # What to write where: dumps go to dir, named by pid, time and reason.
    # events: the GVL events written (what `gvlscope report` counts); records: those and, with
    # stacks, the site and sample records (the file's end record).
    Dump = Struct.new(:path, :reason, :events, :dropped, :duration, :records, keyword_init: true)

    @mutex = Mutex.new
    @options = nil
    @last_dump_at = nil
    @suppressed = 0
    @failed = 0

    class << self
      # suppressed: triggers within min_interval of a dump; failed: dumps that could not be
      # written (a full disk...), each told to the logger, never raised into the application.
      attr_reader :options, :suppressed, :failed

      # Options (DEFAULTS):
      # seconds:      how much history a dump holds
      # dir:          where dumps go (created if missing; must be writable)
      # buffer_bytes: memory for the ring; when the window needs more, the oldest events go first
      # min_interval: seconds between two dumps; triggers in between are counted in `suppressed`
      # signal:       a signal name that dumps ("USR2"), or nil. Installed only if the signal has no
      #               handler yet: an application's (or Puma's) handler is never replaced.
      # logger:       where to say what was dumped (#info/#warn), default $stderr
      # keep:         dumps kept in dir (every process's): after a dump the oldest beyond it are
      #               deleted, so a recorder that dumps for every slow request cannot fill the disk
      # keep_bytes:   the same as a total size (nil: no limit); the newest dump is always kept
      # stacks:       record code locations (release sites, holder samples) while threads wait
      def start(**options)
        @mutex.synchronize do
          raise Error, "the flight recorder is already running" if running?
          raise Error, "cannot start the flight recorder: a trace is running (GVLScope.stop it first)" if GVLScope.tracing?

          options = validate(**options)
          # Alive only: right after fork, Thread.list can still hold the parent's other threads.
          Native.flight_start((options[:seconds] * 1e9).to_i, options[:buffer_bytes], GVLScope.timeslice_us,
                              Thread.list.select(&:alive?), options[:stacks])
          @options = options
          @last_dump_at = nil
          @suppressed = 0
          @failed = 0
          install_trap(options[:signal]) if options[:signal]
        end
        self
      end

      def running?
        Native.flight_active?
      end

      # Writes the kept events to a new file in dir now, unless a dump was written less than
      # min_interval seconds ago or the write failed (then returns nil; a failure is logged,
      # counted in `failed`, and leaves no file). Returns the Dump. Not from a trap handler: use
      # dump_later there.
      def dump(reason = "manual")
        @mutex.synchronize do
          raise Error, "the flight recorder is not running" unless running?
          return nil unless claim_dump_slot

          write_dump(reason)
        end
      end

      # Like dump, but in a background thread, so a request thread (or a trap handler) does not
      # wait for the file. Returns the Thread, or nil if rate-limited or not running.
      def dump_later(reason = "manual")
        return nil unless running?
        return nil unless @mutex.synchronize { claim_dump_slot }

        Thread.new do
          Thread.current.name = "gvlscope dump"
          @mutex.synchronize { write_dump(reason) if running? }
        rescue StandardError => e
          log(:warn, "gvlscope: flight recorder dump failed: #{e.class}: #{e.message}")
          nil
        end
      end

      def stop
        @mutex.synchronize do
          raise Error, "the flight recorder is not running" unless running?

          Native.flight_stop
          restore_trap
          @options = nil
        end
        nil
      end

      # Validates options the way start would, without starting; returns them with defaults filled
      # in. GVLScope::Error with a one-line message when one is wrong or unknown.
      def validate(**options)
        Options.reject_unknown!(options, DEFAULTS.keys, "flight recorder")

        seconds, dir, buffer_bytes, min_interval, signal, logger, keep, keep_bytes, stacks =
          DEFAULTS.merge(options).values_at(*DEFAULTS.keys)
        unless seconds.is_a?(Numeric) && seconds.positive? && seconds <= 60
          raise Error, "flight recorder: seconds must be a number in (0, 60], got #{seconds.inspect}"
        end
        unless buffer_bytes.is_a?(Integer) && buffer_bytes >= 1 << 20
          raise Error, "flight recorder: buffer_bytes must be an Integer >= 1 MiB, got #{buffer_bytes.inspect}"
        end
        unless min_interval.is_a?(Numeric) && min_interval >= 0
          raise Error, "flight recorder: min_interval must be a number of seconds >= 0, got #{min_interval.inspect}"
        end

        { keep: keep, keep_bytes: keep_bytes }.each do |name, limit|
          next if limit.nil? || (limit.is_a?(Integer) && limit >= 1)

          raise Error, "flight recorder: #{name} must be an Integer >= 1 or nil, got #{limit.inspect}"
        end
        raise Error, "flight recorder: stacks must be true or false, got #{stacks.inspect}" unless [true, false].include?(stacks)

        signal = signal_name(signal)
        { seconds: seconds, dir: writable_dir(dir), buffer_bytes: buffer_bytes, min_interval: min_interval,
          signal: signal, logger: logger, keep: keep, keep_bytes: keep_bytes, stacks: stacks }
      end

      private

      def signal_name(signal)
        return nil if signal.nil? || signal == false

        name = signal.to_s.delete_prefix("SIG")
        return name if Signal.list.key?(name) && !%w[KILL STOP VTALRM SEGV BUS ILL FPE].include?(name)

        raise Error, "flight recorder: signal #{signal.inspect} cannot be trapped (try \"USR2\", \"WINCH\" or nil)"
      end

      # Checked at start, so a dump never fails later for a reason known now.
      def writable_dir(dir)
        path = File.expand_path(dir.to_s)
        FileUtils.mkdir_p(path)
        Tempfile.create(".gvlscope-write-test-", path) { nil } # O_EXCL, removed: never a file that was there
        path
      rescue SystemCallError => e
        raise Error, "flight recorder: dump directory #{path} is not writable (#{e.message})", cause: nil
      end

      # Under @mutex. True if a dump may be written now (and records that it is).
      def claim_dump_slot
        now = Process.clock_gettime(Process::CLOCK_MONOTONIC)
        if @last_dump_at && now - @last_dump_at < @options[:min_interval]
          @suppressed += 1
          return false
        end
        @last_dump_at = now
        true
      end

      # Under @mutex.
      def write_dump(reason)
        label = reason.to_s.downcase.gsub(/[^a-z0-9]+/, "-").delete_prefix("-").delete_suffix("-")[0, 40]
        stamp = Time.now.utc.strftime("%Y%m%dT%H%M%S.%L")
        name = "gvlscope-flight-#{Process.pid}-#{stamp}-#{label.empty? ? 'dump' : label}"
        path, (events, dropped, duration_ns, records) = new_file(name) { |candidate| Native.flight_dump(candidate) }
        dump = Dump.new(path: path, reason: reason.to_s, events: events, dropped: dropped, duration: duration_ns / 1e9,
                        records: records)
        log(:info, format("gvlscope: flight recorder dumped %.1f s (%d events) to %s: %s",
                          dump.duration, events, path, reason))
        prune(path)
        dump
      rescue SystemCallError => e
        # The application asked for a record, not for an exception (Errno::ENOSPC in a request).
        @failed += 1
        log(:warn, "gvlscope: flight recorder dump failed (#{@failed} so far), no file kept: #{e.message}")
        nil
      end

      # Deletes the oldest dumps of dir beyond keep (count) and keep_bytes (total size), never
      # +newest+. Other processes (Puma workers) prune the same directory: a file they deleted
      # first is no error.
      def prune(newest)
        dumps = Dir.glob(File.join(@options[:dir], DUMP_GLOB)).filter_map do |path|
          stat = File.lstat(path)
          [path, stat.mtime, stat.size] if stat.file?
        rescue SystemCallError
          nil
        end
        dumps.sort_by! { |path, mtime, _| [path == newest ? 1 : 0, mtime, path] }.reverse! # newest first
        kept = 0
        bytes = 0
        dumps.each do |_, _, size|
          break if @options[:keep] && kept >= @options[:keep]
          break if @options[:keep_bytes] && kept.positive? && bytes + size > @options[:keep_bytes]

          kept += 1
          bytes += size
        end
        dumps.drop(kept).each do |path, _, _|
          File.delete(path)
        rescue SystemCallError
          nil
        end
      end

      # Dumps open with O_EXCL (never overwrite a file): two dumps in one millisecond for the same
      # reason, or a file already there, make the next name NAME-2.gvl, NAME-3.gvl...
      def new_file(name)
        (1..).each do |n|
          path = File.join(@options[:dir], n == 1 ? "#{name}.gvl" : "#{name}-#{n}.gvl")
          return [path, yield(path)]
        rescue Errno::EEXIST
          raise if n >= 100
        end
      end

      def log(level, message)
        logger = @options && @options[:logger]
        if logger then logger.public_send(level, message) else warn(message) end
      end

      def install_trap(name)
        # A trap handler may not take a Mutex: hand the dump to a thread at once.
        previous = Signal.trap(name) { Thread.new { dump_later("signal #{name}") } }
        if %w[DEFAULT SYSTEM_DEFAULT].include?(previous)
          @trapped = [name, previous]
        else
          Signal.trap(name, previous) # the application's handler stays
          @trapped = nil
          log(:warn, "gvlscope: SIG#{name} already has a handler; the flight recorder will not dump on it " \
                     "(choose another with signal:, or nil)")
        end
      end

      def restore_trap
        name, previous = @trapped
        Signal.trap(name, previous) if name
        @trapped = nil
      end

      # exec replaces the image at once: a dump another thread is writing (dump_later, the
      # signal's) would be left cut short, so exec waits for it. Not from a trap handler (no lock
      # may be taken there) nor from the thread that writes it.
      def finish_dump_before_exec
        @mutex.synchronize { nil } unless @mutex.owned?
      rescue ThreadError
        nil # trap context
      end

      # In a forked child: the native side dropped the parent's ring; start again with the same
      # options so every worker records its own history.
      def restart_after_fork
        options = @options or return
        trapped = @trapped
        @mutex = Mutex.new
        @options = nil
        # The trap handler survived the fork (Ruby keeps handlers) and already calls us: keep it.
        start(**options, signal: nil)
        @options = options
        @trapped = trapped
      rescue Error => e
        warn "gvlscope: flight recorder not restarted after fork: #{e.message}"
      end
    end

    GVLScope.after_fork { restart_after_fork }
    GVLScope.after_daemon { restart_after_fork } # Process.daemon: the program goes on there
    GVLScope.before_exec { finish_dump_before_exec }
  end
end
