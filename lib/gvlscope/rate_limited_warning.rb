# frozen_string_literal: true

module GVLScope
  # A warning about a failure at run time (an exporter's endpoint down, a metric that could not
  # be read) that may repeat every few seconds for hours: one line per +every+ seconds at most,
  # the next one telling how many were left out in between. Thread-safe; never raises.
  #
  #   warning = RateLimitedWarning.new("GVLScope::StatsD")
  #   warning.call("cannot send to 127.0.0.1:8125: Connection refused")
  #   # => gvlscope: GVLScope::StatsD: cannot send to 127.0.0.1:8125: Connection refused
  class RateLimitedWarning
    EVERY = 60.0 # seconds

    attr_reader :emitted, :suppressed

    # +logger+ receives #warn (a Logger), else the line goes to Kernel#warn (stderr).
    def initialize(owner, every: EVERY, logger: nil)
      @owner = owner
      @every = every
      @logger = logger
      @lock = Mutex.new
      @last_at = nil
      @emitted = 0
      @suppressed = 0 # in all
      @suppressed_since_last = 0
    end

    # Writes the line unless one was written less than +every+ seconds ago. Returns true if written.
    def call(message)
      now = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      line = @lock.synchronize do
        if @last_at && now - @last_at < @every
          @suppressed += 1
          @suppressed_since_last += 1
          nil
        else
          @last_at = now
          @emitted += 1
          skipped = @suppressed_since_last
          @suppressed_since_last = 0
          text = "gvlscope: #{@owner}: #{message}"
          skipped.positive? ? "#{text} (#{skipped} similar warnings left out since the previous one)" : text
        end
      end
      return false unless line

      @logger ? @logger.warn(line) : Kernel.warn(line)
      true
    rescue StandardError
      false # a broken logger must not break the caller
    end

    # After fork: the child's warnings are its own.
    def reset
      @lock = Mutex.new
      @last_at = nil
      @suppressed_since_last = 0
    end
  end
end
