# frozen_string_literal: true

# The recorder's Ruby side, on the C extension (ext/gvlscope): the live API `require "gvlscope"`
# loads (GVLScope.trace/start/stop, Metrics, FlightRecorder, RequestTiming, fork handling), and
# what loads on first use (Breakdown's per-route and per-job sums, Probe).
require_relative "recorder/native"
require_relative "recorder/trace"
require_relative "recorder/metrics"
require_relative "recorder/fork"
require_relative "recorder/flight_recorder"
require_relative "recorder/request_timing"
require_relative "recorder/callbacks"

module GVLScope
  autoload :Breakdown, File.expand_path("recorder/breakdown", __dir__)
  autoload :Probe, File.expand_path("recorder/probe", __dir__)
end
