# frozen_string_literal: true

# `require "gvlscope/yabeda"`: the public require path of GVLScope::Yabeda (integrations/yabeda.rb).
require_relative "one_copy"
return if GVLScope::OneCopy.elsewhere?(File.expand_path("..", __dir__), "gvlscope/yabeda") # a second copy of the gem: see one_copy.rb
require_relative "supported_ruby" # an older Ruby: one line, before anything else loads
require_relative "integrations/yabeda"
