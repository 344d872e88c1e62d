# frozen_string_literal: true

# `require "gvlscope/rack"`: the public require path of GVLScope::Rack (integrations/rack.rb).
require_relative "support/one_copy"
return if GVLScope::OneCopy.elsewhere?(File.expand_path("..", __dir__), "gvlscope/rack") # a second copy of the gem: see one_copy.rb
require_relative "support/supported_ruby" # an older Ruby: one line, before anything else loads
require_relative "integrations/rack"
require_relative "integrations/railtie" if defined?(::Rails::Railtie) # Rails' request log (docs/rails.md)
