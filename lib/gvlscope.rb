# frozen_string_literal: true

require_relative "gvlscope/version"
require_relative "gvlscope/errors"

module GVLScope
  def self.check_ruby!(engine = RUBY_ENGINE, version = RUBY_VERSION)
    return if engine == "ruby" && Gem::Version.new(version) >= Gem::Version.new(MINIMUM_RUBY)

    raise UnsupportedRuby,
          "gvlscope needs CRuby >= #{MINIMUM_RUBY} (the GVL instrumentation API with STARTED/EXITED " \
          "events and thread-specific storage); this is #{engine} #{version}. " \
          "script/bootstrap in the gvlscope repository builds a suitable Ruby."
  end
  check_ruby!
end

require "gvlscope/gvlscope"
require_relative "gvlscope/probe"
require_relative "gvlscope/trace"
require_relative "gvlscope/metrics"
