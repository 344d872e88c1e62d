# frozen_string_literal: true

require "fileutils"

# The Rails app of docs/apm.md's "In a Rails app" (test/integrations/apm_recipes_test.rb,
# test/gem/docs_test.rb): a one-file app (railties + actionpack, no database) in a directory of
# its own, set up as a user's: the agent's gems loaded before the app's class, as Bundler.require
# does (their Railties with them, which put the agents' middleware in the stack); GVLScope::Rack
# where docs/web.md's rails-application lines put it, as written; the recipe as
# config/initializers/apm.rb, which Rails loads as it boots. GET /:id answers "ok" from a
# controller. It is run in a child Ruby: Rack::Builder.parse_file(config.ru).
module RailsAPMApp
  # What Bundler.require loads for each agent's lines of the app's Gemfile (not dogstatsd-ruby,
  # whose file is not named after the gem: Datadog's recipe requires it).
  GEMS = {
    "New Relic" => %w[newrelic_rpm],
    "Datadog" => %w[datadog],
    "Sentry" => %w[sentry-ruby sentry-rails],
    "Honeybadger Insights" => %w[honeybadger],
    "AppSignal" => %w[appsignal],
  }.freeze

  # Writes the app of +agent+ with +initializer+ into +dir+; returns its config.ru's path.
  def self.write(dir, agent, initializer)
    FileUtils.mkdir_p(File.join(dir, "config/initializers"))
    File.write(File.join(dir, "config/initializers/apm.rb"), initializer)
    application = File.read(File.join(GVLScopeTestHelper::ROOT, "docs/web.md"))[/^```ruby rails-application\n(.*?)^```$/m, 1]
    path = File.join(dir, "config.ru")
    File.write(path, <<~RUBY)
      require "action_controller/railtie"
      #{GEMS.fetch(agent).map { |name| "require #{name.inspect}" }.join("\n")}
      require "gvlscope"

      class APMRecipeApp < Rails::Application
        config.load_defaults Rails::VERSION::STRING.to_f
        config.root = __dir__
        config.eager_load = true
        config.secret_key_base = "gvlscope-test-not-a-secret"
        config.logger = ActiveSupport::Logger.new(File.join(__dir__, "rails.log"))
        config.hosts.clear
        #{application.gsub("\n", "\n  ")}
      end

      class RequestsController < ActionController::Base
        def show = render(plain: "ok")
      end

      Rails.application.initialize!
      Rails.application.routes.draw { get "/:id", to: "requests#show" } # after initialize!, which draws config/routes.rb's
      run Rails.application
    RUBY
    path
  end

  # The app's log (Rails' request lines, an exception's backtrace), for a failure's message.
  def self.log(dir)
    path = File.join(dir, "rails.log")
    File.exist?(path) ? File.read(path) : ""
  end
end
