# frozen_string_literal: true

require_relative "../native"

module GVLScope
  # Where a server or job runner hands work from one thread to another before the app or job
  # starts: stamped there (ext/gvlscope/handoff.c), so that a request's pickup wait covers the
  # whole way from the work's arrival, as its client saw it. Installed by GVLScope::Rack under
  # Puma and by GVLScope::Sidekiq, once per process; without the server's hand-off methods (another
  # server) nothing is installed and the pickup wait is counted on the request's own thread only
  # (RequestTiming). The methods are Ruby, calling C: Ruby's super is
  # cached where a C method's is looked up at every call.
  module Handoffs
    # Puma 6, 7 and 8: every request reaches a pool thread through ThreadPool#<<(client), called by
    # the thread that readied it: the server thread for a new connection, the reactor for a
    # keep-alive connection's next request (or a slow first one), a pool thread for a buffered next
    # request it has no free thread to keep. The pool thread that serves it finds the stamp by
    # env["puma.socket"] when GVLScope::Rack starts the request.
    module PumaThreadPool
      def <<(work)
        Native.handoff_stamp(work)
        super
      end
    end

    # Sidekiq 7 and 8: a processor thread fetches its next job in Processor#fetch (private).
    module SidekiqProcessor
      private

      def fetch
        Native.handoff_fetch_begin
        Native.handoff_fetch_end(super)
      end
    end

    module_function

    # :installed, :absent (no Puma loaded), :unsupported (a Puma without ThreadPool#<<(client):
    # the first call gives the block the line that says so).
    def install_puma
      return @puma if @puma
      return :absent unless defined?(::Puma::Server)

      pool = defined?(::Puma::ThreadPool) && ::Puma::ThreadPool
      unless pool && pool.method_defined?(:<<) && pool.instance_method(:<<).arity == 1
        version = defined?(::Puma::Const::PUMA_VERSION) ? ::Puma::Const::PUMA_VERSION : "(version unknown)"
        yield "gvlscope: Puma #{version} has no ThreadPool#<<(client): gvl-wait counts only the wait inside " \
              "the app, not the wait before it (no queue entry; docs/web.md)" if block_given?
        return @puma = :unsupported
      end

      pool.prepend(PumaThreadPool)
      Native.handoff_claim_in_rack = true
      @puma = :installed
    end

    def install_sidekiq
      return @sidekiq if @sidekiq
      return :absent unless defined?(::Sidekiq::Processor)
      return @sidekiq = :unsupported unless ::Sidekiq::Processor.private_method_defined?(:fetch)

      ::Sidekiq::Processor.prepend(SidekiqProcessor)
      @sidekiq = :installed
    end
  end
end
