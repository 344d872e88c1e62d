# frozen_string_literal: true

# `ruby -rgvlscope/autorun` (what `gvlscope run` puts in RUBYOPT): the public require path of
# integrations/autorun.rb.
require_relative "support/one_copy"
return if GVLScope::OneCopy.elsewhere?(File.expand_path("..", __dir__), "gvlscope/autorun") # a second copy of the gem: see one_copy.rb
require_relative "integrations/autorun"
