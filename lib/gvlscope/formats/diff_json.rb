# frozen_string_literal: true

require "json"
require_relative "format"

module GVLScope
  module Formats
    # An Analysis::Diff as JSON: `gvlscope diff A B --format json`. The schema is in docs/diff.md;
    # Analysis::Diff.from_h reads it back.
    class DiffJSON < Format
      def write(io)
        io << JSON.pretty_generate(@subject.to_h) << "\n"
      end
    end
  end
end
