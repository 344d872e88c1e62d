# frozen_string_literal: true

# `require "gvlscope/sidekiq"`: the public require path of GVLScope::Sidekiq (integrations/sidekiq.rb).
require_relative "integrations/sidekiq"
