# frozen_string_literal: true

# gvlscope's data path, one folder per stage (docs/architecture.md):
#   the C hook (ext/gvlscope) -> the live API here (trace, metrics, flight recorder, measure)
#   -> model/ (a trace read by the engine: Model::Scan) -> analysis/ (findings) -> formats/ (bytes)
#   -> integrations/ (Rack, Puma, Sidekiq, autorun), cli.rb, lab/.
# `require "gvlscope"` loads the live API; the other stages load when first used (autoload), so
# `use GVLScope::Rack` in a config.ru needs nothing more than what Bundler.require does.
require_relative "gvlscope/one_copy"
return if GVLScope::OneCopy.elsewhere?(__dir__, "gvlscope") # a second copy of the gem: see one_copy.rb
require_relative "gvlscope/supported_ruby" # an older Ruby: one line, before anything else loads
require_relative "gvlscope/native"
require_relative "gvlscope/trace"
require_relative "gvlscope/metrics"
require_relative "gvlscope/fork"
require_relative "gvlscope/flight_recorder"
require_relative "gvlscope/request_timing"
require_relative "gvlscope/callbacks"

module GVLScope
  autoload :Rack, File.expand_path("gvlscope/integrations/rack", __dir__)
  autoload :Sidekiq, File.expand_path("gvlscope/integrations/sidekiq", __dir__)
  autoload :PumaPlugin, File.expand_path("gvlscope/integrations/puma_plugin", __dir__)
  autoload :LiveServer, File.expand_path("gvlscope/integrations/live_server", __dir__)
  autoload :Live, File.expand_path("gvlscope/live", __dir__)
  autoload :Breakdown, File.expand_path("gvlscope/breakdown", __dir__)
  autoload :MetricsServer, File.expand_path("gvlscope/integrations/metrics_server", __dir__)
  autoload :StatsD, File.expand_path("gvlscope/integrations/statsd", __dir__)
  autoload :OpenTelemetry, File.expand_path("gvlscope/integrations/open_telemetry", __dir__)
  autoload :Model, File.expand_path("gvlscope/model", __dir__)
  autoload :Analysis, File.expand_path("gvlscope/analysis", __dir__)
  autoload :Formats, File.expand_path("gvlscope/formats", __dir__)
  autoload :Probe, File.expand_path("gvlscope/probe", __dir__)
end

# In a Rails app (Bundler.require loads this file after Rails): the request's GVL wait in Rails'
# request log and instrumentation (docs/rails.md). Nothing is loaded without Rails.
require_relative "gvlscope/integrations/railtie" if defined?(::Rails::Railtie)
