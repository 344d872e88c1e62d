# frozen_string_literal: true

# `plugin :gvlscope` in a Puma config. Options go on a `gvlscope` line (optional):
#
#   plugin :gvlscope
#   gvlscope log_interval: 60, prometheus_port: 9394, prometheus_per_worker: true,
#            flight_recorder: { seconds: 10, dir: "tmp/gvlscope" }, live: true
#
# What it does is in GVLScope::PumaPlugin (lib/gvlscope/integrations/puma_plugin.rb); this file only wires it
# to Puma: the `gvlscope` config method, and the plugin's `start` (in the master).
require_relative "../../gvlscope/support/one_copy"
return if GVLScope::OneCopy.elsewhere?(File.expand_path("../..", __dir__), "puma/plugin/gvlscope") # a second copy of the gem: see one_copy.rb
require_relative "../../gvlscope/support/supported_ruby" # an older Ruby: one line, before anything else loads
require "puma/dsl"
require "puma/plugin"
require "gvlscope/integrations/puma_plugin"

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
  # In the master (cluster) or the server process (single), before workers fork. Raises
  # GVLScope::Error (one line) for a port in use or an unwritable dump directory.
  def start(launcher)
    options = launcher.options
    clustered = (options[:workers] || 0).positive?
    log_writer = launcher.log_writer
    gvlscope = GVLScope::PumaPlugin.new(options[:gvlscope] || {}, log: ->(line) { log_writer.log(line) },
                                                                  clustered: clustered)
    if clustered
      gvlscope.before_workers
      # Each worker runs the per-worker part when it boots, before it loads the app. Added here,
      # once the worker count is final, rather than from the plugin's `config` hook: a
      # before_worker_boot hook added there makes Puma warn in single mode.
      boot_hooks = options.default_options
      boot_hooks[:before_worker_boot] = [*boot_hooks[:before_worker_boot],
                                         { block: ->(index) { gvlscope.serve_here(index) }, cluster_only: true }]
    else
      # After Puma installed its own signal handlers, so the flight recorder sees them.
      events = launcher.events
      events.public_send(events.respond_to?(:after_booted) ? :after_booted : :on_booted) { gvlscope.serve_here(nil) }
    end
  end
end
