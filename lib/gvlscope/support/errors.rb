# frozen_string_literal: true

module GVLScope
  class Error < StandardError; end

  # Raised on load by a Ruby that lacks the GVL instrumentation API gvlscope needs.
  class UnsupportedRuby < Error; end

  # Raised for a file that is not a readable gvlscope trace.
  class FormatError < Error; end
end
