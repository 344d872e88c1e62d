# frozen_string_literal: true

module GVLScope
  VERSION = "0.1.0"
  # The GVL instrumentation API gained STARTED/EXITED, event_data->thread and thread-specific
  # storage in 3.3; the recorder depends on all three.
  MINIMUM_RUBY = "3.3"
end
