# frozen_string_literal: true

require_relative "../version"
require_relative "errors"

# Loaded first by every entry point (exe/gvlscope, `require "gvlscope"` and its autorun, the Puma
# plugin, the Rack, Railtie and Sidekiq integrations), before anything that needs a newer Ruby or
# another gem: an older Ruby gets one line naming what it needs, not a LoadError further on.
# Plain Ruby an old Ruby parses (no syntax newer than 2.x).
module GVLScope
  # nil on a Ruby gvlscope runs on; else the one line that says why not.
  def self.unsupported_ruby(engine = RUBY_ENGINE, version = RUBY_VERSION)
    return nil if engine == "ruby" && version_at_least?(version, MINIMUM_RUBY)

    "gvlscope needs CRuby >= #{MINIMUM_RUBY} (this is #{engine == 'ruby' ? version : "#{engine} #{version}"})"
  end

  # Raises UnsupportedRuby on a Ruby gvlscope does not run on. Without a backtrace: Ruby then
  # prints the message alone, on one line ("app.rb: gvlscope needs ... (GVLScope::UnsupportedRuby)").
  def self.check_ruby!(engine = RUBY_ENGINE, version = RUBY_VERSION)
    message = unsupported_ruby(engine, version)
    raise UnsupportedRuby, message, [] if message
  end
  check_ruby!
end
