# frozen_string_literal: true

require "yabeda"
require_relative "../callbacks"
require_relative "../errors"
require_relative "route_label"

module GVLScope
  # Each measured request's and job's figures as Yabeda histograms (group :gvlscope), for the
  # teams that export Puma's and Sidekiq's metrics through Yabeda (yabeda-prometheus, -datadog, …).
  # Built on GVLScope.on_request / on_job (lib/gvlscope/callbacks.rb): GVLScope::Rack and
  # GVLScope::Sidekiq still measure; this only hands their figures to Yabeda (docs/apm.md).
  #
  #   require "gvlscope/yabeda"
  #   GVLScope::Yabeda.install!   # before or after Yabeda.configure!
  #
  # Per request (tag route: GVLScope::RouteLabel's label, the first max_routes seen, then "other"):
  #   gvlscope_web_request_{gvl_wait,run,idle,gc}_seconds     every request
  #   gvlscope_web_request_queue_seconds                      when a hand-off told its arrival (Puma)
  #   gvlscope_web_request_loop_wait_seconds                  on an event loop's task (Falcon)
  # Per job (tags job_class, queue: not job, which Prometheus gives the scrape job):
  #   gvlscope_background_job_{gvl_wait,run,idle,gc}_seconds  every job
  #   gvlscope_background_job_queue_latency_seconds           when the job had an enqueued_at
  # Not gvlscope_route_* / gvlscope_job_*: those are gvlscope's own /metrics series (GVLScope::Breakdown).
  module Yabeda
    GROUP = :gvlscope
    # A GVL wait worth seeing starts at a fraction of a millisecond; one thread ahead holds it for
    # up to a 100 ms timeslice, several for seconds.
    BUCKETS = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10].freeze
    # Jobs run (and sit in their queue) for minutes.
    JOB_BUCKETS = [*BUCKETS, 30, 60, 300, 1800].freeze
    DEFAULT_MAX_ROUTES = 100
    OTHER = "other"
    OWNER = "GVLScope::Yabeda"
    FIGURES = { gvl_wait: "GVL wait", run: "Time running Ruby (holding the GVL)", idle: "Idle time (IO, sleep, locks)",
                gc: "Time in GC" }.freeze

    @callbacks = nil
    @lock = Mutex.new

    class << self
      # Declares the metrics and registers the callbacks (a second call does nothing).
      #   route:      true: the route tag; false: none (one series); ->(env) { "label" }: yours
      #   max_routes: route labels kept apart; the rest are "other" (the label is read from env
      #               alone, without the response's status: a 404's path has a label of its own)
      def install!(route: true, max_routes: DEFAULT_MAX_ROUTES)
        unless route == true || route == false || route.respond_to?(:call)
          raise Error, "#{OWNER}: route must be true, false or respond to call(env) (a Proc), got #{route.inspect}"
        end
        raise Error, "#{OWNER}: max_routes must be an Integer >= 1, got #{max_routes.inspect}" unless max_routes.is_a?(Integer) && max_routes >= 1

        @lock.synchronize do
          return false if @callbacks

          declare(route ? %i[route] : [])
          @route_label = (RouteLabel.new if route == true)
          @route = route
          @max_routes = max_routes
          @routes = {}
          @callbacks = [GVLScope.on_request { |timing, env| record_request(timing, env) },
                        GVLScope.on_job { |timing, job| record_job(timing, job) }]
        end
        true
      end

      # Tests: the callbacks removed (the metrics stay declared: Yabeda has no way to take one back).
      def uninstall!
        @lock.synchronize do
          @callbacks&.each(&:remove)
          @callbacks = nil
        end
      end

      def installed? = !@callbacks.nil?

      private

      def declare(request_tags)
        return if @declared # Yabeda keeps its metrics for the process: declared once

        @declared = true
        ::Yabeda.configure do
          group GROUP do
            FIGURES.each do |figure, what|
              histogram :"web_request_#{figure}", comment: "#{what} per web request", unit: :seconds, per: :request,
                                                  tags: request_tags, buckets: BUCKETS
            end
            histogram :web_request_queue, comment: "From the request's arrival to its start (Puma's hand-off)",
                                          unit: :seconds, per: :request, tags: request_tags, buckets: BUCKETS
            histogram :web_request_loop_wait, comment: "Wait for the event loop (fiber servers: other fibers ran)",
                                              unit: :seconds, per: :request, tags: request_tags, buckets: BUCKETS
            FIGURES.each do |figure, what|
              histogram :"background_job_#{figure}", comment: "#{what} per job", unit: :seconds, per: :job,
                                                     tags: %i[job_class queue], buckets: JOB_BUCKETS
            end
            histogram :background_job_queue_latency, comment: "From the job's enqueued_at to its start",
                                                     unit: :seconds, per: :job, tags: %i[job_class queue], buckets: JOB_BUCKETS
          end
        end
        @request_tagged = !request_tags.empty?
      end

      def record_request(timing, env)
        metrics = request_metrics or return # its metrics exist from Yabeda.configure! on
        tags = @request_tagged ? { route: route_of(env) } : {}
        measure(metrics, tags, timing)
        if (queue = timing.queue_ns)
          metrics[:queue].measure(tags, queue / 1e9)
        end
        metrics[:loop_wait].measure(tags, timing.loop_wait_ns / 1e9) if timing.loop_wait_known?
      end

      def record_job(timing, job)
        metrics = job_metrics or return
        tags = { job_class: (job["wrapped"] || job["class"]).to_s, queue: job["queue"].to_s }
        measure(metrics, tags, timing)
        if (latency = timing.queue_latency_ns)
          metrics[:queue_latency].measure(tags, latency / 1e9)
        end
      end

      def measure(metrics, tags, timing)
        metrics[:gvl_wait].measure(tags, timing.wait_ns / 1e9)
        metrics[:run].measure(tags, timing.run_ns / 1e9)
        metrics[:idle].measure(tags, timing.idle_ns / 1e9)
        metrics[:gc].measure(tags, timing.gc_ns / 1e9)
      end

      # The metric objects by figure, once Yabeda is configured (nil before).
      def request_metrics = @request_metrics ||= metrics_named("web_request", %i[queue loop_wait])
      def job_metrics = @job_metrics ||= metrics_named("background_job", %i[queue_latency])

      def metrics_named(prefix, more)
        return nil unless ::Yabeda.configured?

        [*FIGURES.keys, *more].to_h { |figure| [figure, ::Yabeda.metrics.fetch("#{GROUP}_#{prefix}_#{figure}")] }.freeze
      end

      # The request's route label, one of the first max_routes seen, else "other".
      def route_of(env)
        # route: false after a first install! with routes: the metrics keep the tag (declared once)
        label = (if @route_label then @route_label.call(env, nil) elsif @route then @route.call(env) end)&.to_s || OTHER
        return label if @routes.key?(label)

        @lock.synchronize { @routes[label] = true if @routes.size < @max_routes }
        @routes.key?(label) ? label : OTHER
      end
    end
  end
end
