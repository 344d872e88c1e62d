# frozen_string_literal: true

# Loaded once per process even when two copies of the gem meet (Bundler evaluates a path gem's
# gemspec, which requires this file, before a global `gvlscope run` loads its own copy: one_copy.rb).
module GVLScope
  VERSION = "0.1.0" unless const_defined?(:VERSION, false)
  # The GVL instrumentation API gained STARTED/EXITED, event_data->thread and thread-specific
  # storage in 3.3; the recorder depends on all three.
  MINIMUM_RUBY = "3.3" unless const_defined?(:MINIMUM_RUBY, false)

  # True if +version+ ("3.4.1") is +minimum+ ("3.4") or later, compared number by number. Not
  # Gem::Version: a Ruby started with --disable-gems has no RubyGems, and is traced all the same.
  unless respond_to?(:version_at_least?)
    def self.version_at_least?(version, minimum)
      (version.scan(/\d+/).map(&:to_i) <=> minimum.scan(/\d+/).map(&:to_i)) >= 0
    end
  end
end
