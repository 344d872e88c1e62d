# frozen_string_literal: true

require_relative "rules/convoy"
require_relative "rules/hog"
require_relative "rules/contention"

module GVLScope
  module Analysis
    # The finding rules, in the order their findings are listed. A new finding is one file in
    # rules/ (a subclass of Rule) and one entry here.
    RULES = [Rules::Convoy, Rules::Hog, Rules::Contention].freeze
  end
end
