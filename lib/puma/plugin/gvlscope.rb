# frozen_string_literal: true

# `plugin :gvlscope` in a Puma config. Options go on a `gvlscope` line (optional):
#
#   plugin :gvlscope
#   gvlscope log_interval: 60, prometheus_port: 9394, prometheus_per_worker: true,
#            flight_recorder: { seconds: 10, dir: "tmp/gvlscope" }
#
# What it does is in GVLScope::PumaPlugin (lib/gvlscope/puma_plugin.rb); this file only wires it
# to Puma's plugin API: `config` (to add a worker-boot hook) and `start` (in the master).
require "puma/plugin"
require "gvlscope/puma_plugin"

module GVLScope
  # The `gvlscope` line of a Puma config. Validated here, so a typo stops Puma at boot.
  module PumaDSL
    def gvlscope(**options)
      GVLScope::PumaPlugin.validate(options)
      @options[:gvlscope] = options
    end
  end
end
Puma::DSL.include(GVLScope::PumaDSL)

Puma::Plugin.create do
  # While the config is read: every worker runs the per-worker part when it boots, before it
  # loads the app (cluster mode only; single mode starts it from `start`).
  def config(dsl)
    plugin = self
    dsl.before_worker_boot { |index| plugin.gvlscope&.serve_here(index) }
  end

  attr_reader :gvlscope

  # In the master (cluster) or the server process (single), before workers fork. Raises
  # GVLScope::Error (one line) for a port in use or an unwritable dump directory.
  def start(launcher)
    clustered = (launcher.options[:workers] || 0).positive?
    log_writer = launcher.log_writer
    @gvlscope = GVLScope::PumaPlugin.new(launcher.options[:gvlscope] || {}, log: ->(line) { log_writer.log(line) },
                                                                           clustered: clustered)
    if clustered
      @gvlscope.before_workers
    else
      # After Puma installed its own signal handlers, so the flight recorder sees them.
      events = launcher.events
      hook = events.respond_to?(:after_booted) ? :after_booted : :on_booted
      events.public_send(hook) { @gvlscope.serve_here(nil) }
    end
  end
end
