# frozen_string_literal: true

require_relative "../native"

module GVLScope
  # Where a server or job runner hands work from one thread to another before the app or job
  # starts: stamped there (ext/gvlscope/handoff.c), so that a request's pickup wait covers the
  # whole way from the work's arrival, as its client saw it. Installed by GVLScope::Rack under
  # Puma and by GVLScope::Sidekiq, once per process; without the server's hand-off methods (another
  # server, a Puma too old to have them) nothing is installed and the pickup wait is counted on the
  # request's own thread only (RequestTiming). The methods are Ruby, calling C: Ruby's super is
  # cached where a C method's is looked up at every call.
  module Handoffs
    # Puma 6.5+ (7 and 8 tested): the server thread accepts in Server#new_client(io, listener). The
    # pool thread that serves the connection finds the stamp by env["puma.socket"] when
    # GVLScope::Rack starts its first request. A keep-alive connection's next requests are not
    # stamped where Puma's reactor thread hands them back (#reactor_wakeup): that would cost each
    # of them ~800 instructions, a third of gvlscope's budget for a request (docs/web.md).
    module PumaServer
      def new_client(io, listener)
        Native.handoff_stamp(io)
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

    def install_puma
      return @puma if @puma
      return :absent unless defined?(::Puma::Server) && defined?(::Puma::Client)

      server = ::Puma::Server
      unless server.method_defined?(:new_client) && server.instance_method(:new_client).arity == 2
        return @puma = :unsupported
      end

      server.prepend(PumaServer)
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
