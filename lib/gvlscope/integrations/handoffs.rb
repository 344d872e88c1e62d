# frozen_string_literal: true

require_relative "../native"

module GVLScope
  # Where a server or job runner hands work from one thread to another before the app or job
  # starts: stamped there (ext/gvlscope/handoff.c), so that a request's pickup wait covers the
  # whole way from the work's arrival, as its client saw it. Installed by GVLScope::Rack under
  # Puma and by GVLScope::Sidekiq, once per process; without the server's hand-off methods (another
  # server, a Puma too old or too new to have them) nothing is installed and the pickup wait is
  # counted on the request's own thread only (RequestTiming).
  module Handoffs
    # Puma 6.5+ (7 and 8 tested): the server thread accepts in Server#new_client(io, listener), the
    # reactor hands a ready connection back in #reactor_wakeup(client), a pool thread takes it in
    # #process_client([processor,] client).
    PUMA_METHODS = %i[new_client reactor_wakeup process_client].freeze

    module_function

    def install_puma
      return :installed if @puma
      return :absent unless defined?(::Puma::Server) && defined?(::Puma::Client)

      server = ::Puma::Server
      return :unsupported unless PUMA_METHODS.all? { |name| server.method_defined?(name) } &&
                                 ::Puma::Client.method_defined?(:io)

      server.prepend(Native::PumaHandoff)
      @puma = :installed
    end

    # Sidekiq 7 and 8: a processor thread fetches its next job in Processor#fetch (private).
    def install_sidekiq
      return :installed if @sidekiq
      return :absent unless defined?(::Sidekiq::Processor)
      return :unsupported unless ::Sidekiq::Processor.private_method_defined?(:fetch)

      ::Sidekiq::Processor.prepend(Native::SidekiqHandoff)
      @sidekiq = :installed
    end
  end
end
