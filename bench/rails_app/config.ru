# frozen_string_literal: true

# The realistic request of bench/web_instructions.rb (APP=rails): a small Rails app (railties,
# actionpack, actionview; no database) whose /records action renders an ERB template with a layout
# from 25 in-memory records, logging each request as Rails does in production (to /dev/null).
#
# GVLSCOPE_TOGGLE=1: one process serves every setup, switched by GET /__gvlscope/<setup>, as
# test/fixtures/web/app.ru does:
#   plain             no gvlscope
#   no_server_timing  GVLScope::Rack (metrics, per-route numbers) without the header
#   metrics           GVLScope::Rack with its Server-Timing header
#   all               GVLScope::Rack with the header and the flight recorder (10 s ring, never dumping)
require "action_controller/railtie"
require "action_view/railtie"
require "gvlscope/rack"
require_relative "../../test/fixtures/web/bench_control"

class BenchRailsApp < Rails::Application
  config.load_defaults Rails::VERSION::STRING.to_f
  config.root = __dir__
  config.eager_load = true
  config.secret_key_base = "gvlscope-bench-not-a-secret"
  config.logger = ActiveSupport::Logger.new(File::NULL)
  config.log_level = :info
  config.hosts.clear
end

Rails.application.initialize!
Rails.application.routes.draw do
  get "/records", to: "records#index"
  get "/records/:id", to: "records#index", as: :record
end

# After initialize! and the routes, so the controller's views get the route helpers.
Record = Struct.new(:id, :name, :email, :plan, :balance_cents, :created_at)
RECORDS = Array.new(25) do |i|
  Record.new(i + 1, "Customer #{i + 1}", "customer#{i + 1}@example.com", %w[free team business][i % 3],
             (i * 12_345) % 1_000_000, Time.utc(2026, 1, 1) + (i * 86_400)).freeze
end.freeze

class RecordsController < ActionController::Base
  prepend_view_path File.join(__dir__, "views")
  layout "application"

  def index
    @records = RECORDS
    @total_cents = RECORDS.sum(&:balance_cents)
  end
end

rails = Rails.application
if ENV["GVLSCOPE_TOGGLE"] == "1"
  dumps = ENV.fetch("GVLSCOPE_FLIGHT_DIR", "tmp/gvlscope")
  setups = {
    "plain" => rails,
    "no_server_timing" => GVLScope::Rack.new(rails, server_timing: false),
    "metrics" => GVLScope::Rack.new(rails),
    "all" => GVLScope::Rack.new(rails, flight_recorder: { dir: dumps, signal: nil, wait_over_ms: nil, duration_over_ms: 100_000 }),
  }
  GVLScope::FlightRecorder.stop
  GVLScope::Metrics.disable
  handler = rails
  run lambda { |env|
    path = env["PATH_INFO"]
    if path.start_with?("/__gvlscope/")
      mode = path.delete_prefix("/__gvlscope/")
      if (answer = BenchControl.call(mode)) then next [200, {}, [answer]] end

      handler = setups[mode] or next [404, {}, ["setups: #{setups.keys.join(', ')}"]]
      GVLScope::FlightRecorder.stop if GVLScope::FlightRecorder.running? && mode != "all"
      if mode == "plain"
        GVLScope::Metrics.disable
      else
        GVLScope::Metrics.enable
      end
      GVLScope::FlightRecorder.start(dir: dumps, signal: nil) if mode == "all" && !GVLScope::FlightRecorder.running?
      GC.start # every setup's measurement starts from the same heap
      next [200, {}, [mode]]
    end
    handler.call(env)
  }
else
  run GVLScope::Rack.new(rails)
end
