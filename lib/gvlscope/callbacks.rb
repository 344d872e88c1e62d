# frozen_string_literal: true

require_relative "native"

module GVLScope
  # The blocks of GVLScope.on_request and GVLScope.on_job: what a team wires to its APM (docs/apm.md).
  # GVLScope::Rack calls the request ones after each measured request, GVLScope::Sidekiq and
  # EventLoops.measure_job the job ones after each measured job, once the figures are final (the
  # timing finished, its route or job series counted).
  #
  # A callback that raises is warned about once, where its integration warns (GVLScope::Rack's
  # logger: or Kernel#warn, Sidekiq's logger, Kernel#warn for measure_job), and called again at the
  # next request: the app never sees the exception, and the other callbacks still run.
  module Callbacks
    # What GVLScope.on_request / on_job return: #remove takes the callback out.
    class Callback
      attr_reader :kind

      def initialize(kind, block)
        @kind = kind
        @block = block
        @warned = false
      end

      def call(timing, subject, logger)
        @block.call(timing, subject)
      rescue StandardError, ScriptError => e # the app's thread: a callback's failure must not reach it
        warn_once(e, logger)
      end

      def remove = Callbacks.remove(self)

      def inspect = "#<#{self.class} on_#{@kind} #{@block.source_location&.join(':')}>"

      private

      def warn_once(error, logger)
        return if @warned

        @warned = true
        where = @block.source_location&.join(":") || "a block"
        line = "gvlscope: the on_#{@kind} callback at #{where} raised #{error.class}: #{error.message} " \
               "(said once for this callback; it is still called)"
        logger ? logger.warn(line) : Kernel.warn(line)
      rescue StandardError
        nil # a logger that fails must not fail the request
      end
    end

    NONE = [].freeze
    # Copied on each change and frozen: a request reads the list with no lock.
    @request = NONE
    @job = NONE
    @lock = Mutex.new

    class << self
      attr_reader :request, :job

      def add(kind, block)
        raise ArgumentError, "GVLScope.on_#{kind} needs a block: GVLScope.on_#{kind} { |timing, #{kind == :request ? 'env' : 'job'}| ... }" unless block

        callback = Callback.new(kind, block)
        @lock.synchronize { replace(kind, [*list(kind), callback].freeze) }
        callback
      end

      # True when it was registered (a second #remove does nothing).
      def remove(callback)
        @lock.synchronize do
          kept = list(callback.kind).reject { |c| c.equal?(callback) }
          next false if kept.size == list(callback.kind).size

          replace(callback.kind, kept.empty? ? NONE : kept.freeze)
          true
        end
      end

      # Tests: no callbacks.
      def clear
        @lock.synchronize do
          replace(:request, NONE)
          replace(:job, NONE)
        end
      end

      # After a measured request (GVLScope::Rack): +logger+ receives a failing callback's warning (nil: Kernel#warn).
      def request_finished(timing, env, logger)
        @request.each { |callback| callback.call(timing, env, logger) }
      end

      # After a measured job (GVLScope::Sidekiq, EventLoops.measure_job).
      def job_finished(timing, job, logger)
        @job.each { |callback| callback.call(timing, job, logger) }
      end

      private

      def list(kind) = kind == :request ? @request : @job

      def replace(kind, callbacks)
        if kind == :request
          @request = callbacks
          Native.request_callbacks = !callbacks.empty? # RackRequests#finish leaves the request to Ruby only then
        else
          @job = callbacks
        end
      end
    end
  end

  class << self
    # The block is called with (timing, env) after each request GVLScope::Rack measured: timing is
    # the request's finished GVLScope::RequestTiming, env its Rack env. Returns the callback (#remove).
    def on_request(&block) = Callbacks.add(:request, block)

    # The block is called with (timing, job) after each job GVLScope::Sidekiq or
    # EventLoops.measure_job measured: timing is the job's finished GVLScope::RequestTiming, job
    # Sidekiq's job Hash ("class", "jid", "queue", "enqueued_at", ...; measure_job: its job: argument).
    # Returns the callback (#remove).
    def on_job(&block) = Callbacks.add(:job, block)
  end
end
