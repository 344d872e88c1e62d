# frozen_string_literal: true

require_relative "../support/supported_ruby"

# The C recorder (ext/gvlscope): GVLScope::Native and GVLScope::RequestTiming's counting.
begin
  require "gvlscope/gvlscope" # by load path: an installed gem keeps it in its extension directory
rescue LoadError => e
  raise unless e.message.include?("incompatible") || e.message.include?("undefined symbol")

  # A checkout shared by two Rubies: lib/gvlscope/gvlscope.so was compiled by the other one.
  raise GVLScope::Error, "gvlscope's native extension does not match this Ruby (#{RUBY_VERSION}): #{e.message}. " \
                         "In a checkout, rebuild it with `bundle exec rake clobber compile`."
end
