# frozen_string_literal: true

# `require "gvlscope/sidekiq"`: the public require path of GVLScope::Sidekiq (integrations/sidekiq.rb).
require_relative "support/one_copy"
return if GVLScope::OneCopy.elsewhere?(File.expand_path("..", __dir__), "gvlscope/sidekiq") # a second copy of the gem: see one_copy.rb
require_relative "support/supported_ruby" # an older Ruby: one line, before Sidekiq loads
require_relative "integrations/sidekiq"
