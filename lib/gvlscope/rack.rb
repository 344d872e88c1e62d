# frozen_string_literal: true

# `require "gvlscope/rack"`: the public require path of GVLScope::Rack (integrations/rack.rb).
require_relative "integrations/rack"
