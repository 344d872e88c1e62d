# frozen_string_literal: true

require_relative "../recorder/native"

module GVLScope
  # Where a server or job runner hands work from one thread to another before the app or job
  # starts: stamped there (ext/gvlscope/handoff.c), so that a request's pickup wait covers the
  # whole way from the work's arrival, as its client saw it. Installed by GVLScope::Rack under
  # Puma and by GVLScope::Sidekiq, once per process; without the server's hand-off methods (another
  # server) nothing is installed and the pickup wait is counted on the request's own thread only
  # (RequestTiming).
  module Handoffs
    # Puma 6, 7 and 8: every request reaches a pool thread through ThreadPool#<<(client), called by
    # the thread that readied it: the server thread for a new connection, the reactor for a
    # keep-alive connection's next request (or a slow first one), a pool thread for a buffered next
    # request it has no free thread to keep. It pushes the client on the pool's todo list; the
    # list this gives the pool stamps each push in C (Native::StampingQueue, StampingArray). The
    # pool thread that serves it finds the stamp by env["puma.socket"] when GVLScope::Rack starts
    # the request.
    module PumaThreadPool
      STAMPING = { ::Thread::Queue => Native::StampingQueue, ::Array => Native::StampingArray }.freeze

      private

      # Before the pool's first thread starts (each thread keeps the list it started with): called
      # in ThreadPool#initialize for its minimum threads, else at its first request.
      def spawn_thread
        if @spawned.zero? && !STAMPING.value?(@todo.class)
          stamping = STAMPING[@todo.class]
          if stamping
            todo = stamping.new
            todo.push(@todo.shift) until @todo.empty? # a min-0 pool's first request, pushed already
            @todo = todo
          else
            Handoffs.puma_unsupported("keeps its todo list in a #{@todo.class}")
          end
        end
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

    # :installed, :absent (no Puma loaded), :unsupported (a Puma without ThreadPool#spawn_thread:
    # the block gets the line that says so, once; also later, if a pool's todo list is neither a
    # Thread::Queue nor an Array).
    def install_puma(&warn)
      return @puma if @puma
      return :absent unless defined?(::Puma::Server)

      @puma_warn = warn
      pool = defined?(::Puma::ThreadPool) && ::Puma::ThreadPool
      unless pool && pool.private_method_defined?(:spawn_thread) && pool.instance_method(:spawn_thread).arity.zero?
        puma_unsupported("has no ThreadPool#spawn_thread")
        return @puma = :unsupported
      end

      pool.prepend(PumaThreadPool)
      Native.handoff_claim_in_rack = true
      @puma = :installed
    end

    # The one line that says this Puma's requests are measured from inside the app only.
    def puma_unsupported(why)
      warn, @puma_warn = @puma_warn, nil
      version = defined?(::Puma::Const::PUMA_VERSION) ? ::Puma::Const::PUMA_VERSION : "(version unknown)"
      warn&.call("gvlscope: Puma #{version} #{why}: gvl-wait counts only the wait inside the app, not the " \
                 "wait before it (no queue entry; docs/web.md)")
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
