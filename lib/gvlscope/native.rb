# frozen_string_literal: true

require_relative "version"
require_relative "errors"

module GVLScope
  def self.check_ruby!(engine = RUBY_ENGINE, version = RUBY_VERSION)
    return if engine == "ruby" && version_at_least?(version, MINIMUM_RUBY)

    raise UnsupportedRuby,
          "gvlscope needs CRuby >= #{MINIMUM_RUBY} (the GVL instrumentation API with STARTED/EXITED " \
          "events and thread-specific storage); this is #{engine} #{version}. " \
          "script/bootstrap in the gvlscope repository builds a suitable Ruby."
  end
  check_ruby!
end

# The C recorder (ext/gvlscope): GVLScope::Native and GVLScope::RequestTiming's counting.
begin
  require "gvlscope/gvlscope" # by load path: an installed gem keeps it in its extension directory
rescue LoadError => e
  raise unless e.message.include?("incompatible") || e.message.include?("undefined symbol")

  # A checkout shared by two Rubies: lib/gvlscope/gvlscope.so was compiled by the other one.
  raise GVLScope::Error, "gvlscope's native extension does not match this Ruby (#{RUBY_VERSION}): #{e.message}. " \
                         "In a checkout, rebuild it with `bundle exec rake clobber compile`."
end
