# frozen_string_literal: true

require "rails" # Rails::Railtie with what it needs (rails/railtie alone does not load)

module GVLScope
  # Rails: the request's GVL figures in Rails' own request log and instrumentation, from
  # env["gvlscope"] (GVLScope::Rack's RequestTiming; the middleware is still yours to insert,
  # docs/rails.md). Loaded by `require "gvlscope"` (Bundler.require) or `require "gvlscope/rack"`
  # when Rails is loaded; never loads Rails itself.
  #
  # - `process_action.action_controller`'s payload gets :gvl, the figures of the request so far
  #   (RequestTiming#to_h plus pickup_wait_ms, and queue_ms when a hand-off told the arrival), for
  #   any subscriber: lograge's custom_options, a log line of your own.
  # - The `Completed 200 OK in 3ms (Views: 0.2ms | GVL: 12.0ms | GC: 0.0ms)` line gets the request's
  #   GVL wait (ActionController's log_process_action, as ActiveRecord adds its time).
  #
  # Requests without env["gvlscope"] (no middleware, or sampled out) are left as they were.
  class Railtie < ::Rails::Railtie
    ENV_KEY = "gvlscope" # GVLScope::Rack::ENV_KEY, without loading the middleware

    # The payload's :gvl: the figures at the end of the action (its instrumentation block), the
    # GVL wait before the request reached Rails included.
    def self.figures(timing)
      figures = timing.to_h
      figures[:pickup_wait_ms] = timing.pickup_wait_ms.round(3)
      queue = timing.queue_ms
      figures[:queue_ms] = queue.round(3) if queue
      figures
    end

    # Included in ActionController::Base and ::API when they load.
    module ControllerRuntime
      extend ActiveSupport::Concern

      private

      def append_info_to_payload(payload)
        super
        timing = request.env[ENV_KEY]
        payload[:gvl] = Railtie.figures(timing) if timing
      end

      module ClassMethods # :nodoc:
        # The words in parentheses of the `Completed` line (ActionController::LogSubscriber asks).
        def log_process_action(payload)
          messages = super
          gvl = payload[:gvl]
          messages << format("GVL: %.1fms", gvl[:gvl_wait_ms]) if gvl
          messages
        end
      end
    end

    initializer "gvlscope.action_controller" do
      ActiveSupport.on_load(:action_controller) { include GVLScope::Railtie::ControllerRuntime }
    end
  end
end
