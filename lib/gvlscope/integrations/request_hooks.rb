# frozen_string_literal: true

require_relative "../support/errors"
require_relative "../support/units"
require_relative "../recorder/flight_recorder"

module GVLScope
  # What the per-request integrations (GVLScope::Rack, GVLScope::Sidekiq) share: the `sample:` and
  # `flight_recorder:` options, and warnings that cannot flood a log.
  module RequestHooks
    RECORDER_TRIGGERS = { wait_over_ms: 100, duration_over_ms: nil }.freeze

    module_function

    # `sample:`: the share of requests/jobs measured, 0.0..1.0 (1.0: all of them).
    def sample_rate(option, owner)
      return 1.0 if option.nil?
      unless option.is_a?(Numeric) && option >= 0 && option <= 1
        raise Error, "#{owner}: sample must be a number in 0.0..1.0, got #{option.inspect}"
      end

      option.to_f
    end

    # `flight_recorder:` true or a Hash of triggers (wait_over_ms:, duration_over_ms:) and
    # FlightRecorder.start's options. Starts the recorder (unless one runs already: the Puma
    # plugin's, or a preloaded master's restarted after fork) and returns the thresholds in ns,
    # or nil when the option is off. +defaults+: recorder options the integration prefers.
    def flight_recorder_triggers(option, owner, defaults: {})
      return nil if option.nil? || option == false

      settings = option == true ? {} : option
      raise Error, "#{owner}: flight_recorder must be true or a Hash, got #{option.inspect}" unless settings.is_a?(Hash)

      Options.reject_unknown!(settings, RECORDER_TRIGGERS.keys + FlightRecorder::DEFAULTS.keys, owner,
                              what: "flight_recorder option")
      triggers = RECORDER_TRIGGERS.merge(settings.slice(*RECORDER_TRIGGERS.keys))
      thresholds = { wait_over_ns: Units.ms_option_to_ns(triggers[:wait_over_ms], "flight_recorder wait_over_ms", owner),
                     duration_over_ns: Units.ms_option_to_ns(triggers[:duration_over_ms], "flight_recorder duration_over_ms",
                                                             owner) }
      FlightRecorder.start(**defaults.merge(settings.except(*RECORDER_TRIGGERS.keys))) unless FlightRecorder.running?
      thresholds
    end

    # Why +timing+ passes the recorder's thresholds ("gvl wait 120 ms"), or nil.
    def recorder_trigger(thresholds, timing)
      wait_over, duration_over = thresholds.values_at(:wait_over_ns, :duration_over_ns)
      if wait_over && timing.wait_ns >= wait_over
        format("gvl wait %.0f ms", timing.wait_ms)
      elsif wait_over && timing.respond_to?(:loop_wait_ns) && timing.loop_wait_ns >= wait_over
        format("event loop wait %.0f ms", timing.loop_wait_ms)
      elsif duration_over && timing.duration_ns >= duration_over
        format("duration %.0f ms", timing.duration_ms)
      end
    end

    # A warning said at most once per +interval+ seconds; the ones in between are counted and the
    # next line says how many were left out. The app keeps working whatever gvlscope's trouble.
    class Warning
      def initialize(interval: 60, &writer)
        @interval = interval
        @writer = writer
        @last_at = nil
        @suppressed = 0
        @lock = Mutex.new
      end

      attr_reader :suppressed

      # True when the line was written.
      def warn(message)
        now = Process.clock_gettime(Process::CLOCK_MONOTONIC)
        suppressed = @lock.synchronize do
          if @last_at && now - @last_at < @interval
            @suppressed += 1
            return false
          end
          @last_at = now
          @suppressed.tap { @suppressed = 0 }
        end
        @writer.call(suppressed.zero? ? message : "#{message} (#{suppressed} more like it left out)")
        true
      rescue StandardError
        false # a logger that fails must not fail the request
      end
    end
  end
end
