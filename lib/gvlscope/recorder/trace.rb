# frozen_string_literal: true

require_relative "native"
require_relative "event_loops"

module GVLScope
  # What GVLScope.stop returns.
  #   path        the trace file
  #   events      events written
  #   dropped     events lost because the writer fell behind (buffers full) or a write failed
  #   duration    seconds between start and stop
  #   write_error nil, or why writing failed (the file then holds what was written before)
  TraceSummary = Struct.new(:path, :events, :dropped, :duration, :write_error, keyword_init: true) do
    def to_s
      text = format("%s: %d events in %.3f s", path, events, duration)
      text += ", #{dropped} dropped" if dropped.positive?
      text += " (write error: #{write_error})" if write_error
      text
    end
  end

  DEFAULT_BUFFER_BYTES = 64 * 1024 * 1024

  class << self
    # Starts tracing every thread's GVL state changes into +path+ (the native .gvl format).
    #   buffer_bytes: memory for events not yet written; past it events are dropped (and counted).
    #   stacks: also record code locations while threads wait for the GVL: each release's site
    #           (the Ruby frames that gave the GVL up) and the holder's stack every ~10 ms.
    #   fibers: also record event loops' turns (GVLScope::EventLoops; docs/fibers.md): true, false,
    #           or nil (the default): when the calling thread has a Fiber scheduler. Tracking that
    #           starts later (GVLScope::Rack's first request on a task) is recorded too.
    def start(path, buffer_bytes: DEFAULT_BUFFER_BYTES, stacks: true, fibers: nil)
      raise Error, "a trace is already running (to #{@trace_path})" if tracing?
      raise Error, "the flight recorder is running (GVLScope::FlightRecorder.stop it first)" if Native.flight_active?
      unless buffer_bytes.is_a?(Integer) && buffer_bytes >= 1 << 20
        raise ArgumentError, "buffer_bytes must be an Integer >= 1 MiB, got #{buffer_bytes.inspect}"
      end
      raise ArgumentError, "stacks must be true or false, got #{stacks.inspect}" unless [true, false].include?(stacks)
      raise ArgumentError, "fibers must be true, false or nil, got #{fibers.inspect}" unless [true, false, nil].include?(fibers)

      path = File.expand_path(path.to_path) if path.respond_to?(:to_path)
      path = String(path)
      fibers = !Fiber.scheduler.nil? if fibers.nil?
      # Before the trace: its first turns are whole (a turn that began untracked is not recorded).
      @tracking_loops = fibers && !EventLoops.tracking?
      EventLoops.track if @tracking_loops
      begin
        Native.trace_start(path, buffer_bytes, timeslice_us, Thread.list, stacks)
      rescue StandardError
        untrack_loops
        raise
      end
      @trace_path = path
      @trace_options = { buffer_bytes: buffer_bytes, stacks: stacks, fibers: fibers }
      self
    end

    # Stops the trace and returns a TraceSummary.
    def stop
      raise Error, "no trace is running" unless tracing?

      events, dropped, duration_ns, write_error = Native.trace_stop
      untrack_loops
      TraceSummary.new(path: @trace_path, events: events, dropped: dropped,
                       duration: duration_ns / 1e9, write_error: write_error)
    ensure
      @trace_path = nil unless tracing?
    end

    # True while a trace to a file runs (not for the flight recorder, which shares its buffers).
    def tracing?
      Native.trace_active? && !Native.flight_active?
    end

    # The file the running trace writes to (nil when none runs).
    def trace_path = tracing? ? @trace_path : nil

    # Traces the block; returns the TraceSummary (the block's value is not kept: use start/stop
    # when you need it).
    def trace(path, **options)
      start(path, **options)
      begin
        yield
      ensure
        summary = stop
      end
      summary
    end

    # Loop tracking that the trace's start turned on ends with it.
    def untrack_loops
      EventLoops.track(false) if @tracking_loops
      @tracking_loops = false
    end

    # NAME-2.gvl for app.gvl (suffix 2): the name of a process's next trace when its first is taken.
    def suffixed_path(path, suffix) = path.sub(/(\.gvl)?\z/, "-#{suffix}\\1")

    # The scheduler's timeslice in microseconds: 100 ms, or RUBY_THREAD_TIMESLICE (ms) on 3.4+.
    def timeslice_us
      configured = ENV["RUBY_THREAD_TIMESLICE"].to_s
      if GVLScope.version_at_least?(RUBY_VERSION, "3.4") && configured.match?(/\A\d+\z/) && configured.to_i.positive?
        configured.to_i * 1000
      else
        100_000
      end
    end
  end
end
