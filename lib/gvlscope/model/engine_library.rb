# frozen_string_literal: true

require_relative "../support/errors"

module GVLScope
  module Model
    # Loads the report engine's extension, GVLScope::Engine (built with the gem; in a checkout, by
    # `rake compile`): what Scan runs, and where Record reads format.h's record layout. Raises
    # Error (one line) where it does not load.
    def self.load_engine_library
      require_engine
    rescue LoadError => e
      # A checkout shared by two Rubies: lib/gvlscope/gvlscope_engine.so was compiled by the other one.
      detail = e.message.include?("incompatible") || e.message.include?("undefined symbol") ? "does not match this Ruby" : "does not load"
      raise Error, "gvlscope's report engine #{detail} (#{RUBY_VERSION}): #{e.message}. " \
                   "In a checkout, build it with `bundle exec rake clobber compile`."
    end

    # By load path (an installed gem keeps it in its extension directory), else beside lib/gvlscope
    # (a checkout run as exe/gvlscope, lib not on the load path).
    def self.require_engine
      require "gvlscope/gvlscope_engine"
    rescue LoadError
      require_relative "../gvlscope_engine"
    end
    private_class_method :require_engine
  end
end
