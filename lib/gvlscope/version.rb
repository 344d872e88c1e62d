# frozen_string_literal: true

module GVLScope
  VERSION = "0.1.0"
  # The GVL instrumentation API gained STARTED/EXITED, event_data->thread and thread-specific
  # storage in 3.3; the recorder depends on all three.
  MINIMUM_RUBY = "3.3"

  # True if +version+ ("3.4.1") is +minimum+ ("3.4") or later, compared number by number. Not
  # Gem::Version: a Ruby started with --disable-gems has no RubyGems, and is traced all the same.
  def self.version_at_least?(version, minimum)
    (version.scan(/\d+/).map(&:to_i) <=> minimum.scan(/\d+/).map(&:to_i)) >= 0
  end
end
