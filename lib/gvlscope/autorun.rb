# frozen_string_literal: true

# `ruby -rgvlscope/autorun` (what `gvlscope run` puts in RUBYOPT): the public require path of
# integrations/autorun.rb.
require_relative "integrations/autorun"
