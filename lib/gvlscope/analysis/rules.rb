# frozen_string_literal: true

require_relative "rules/convoy"
require_relative "rules/hog"
require_relative "rules/long_hold"
require_relative "rules/contention"
require_relative "rules/hand_off"
require_relative "rules/garbage_collection"
require_relative "rules/loop_stall"

module GVLScope
  module Analysis
    # The finding rules. Report#findings ranks their findings by the wait each explains (GVL wait,
    # or an event loop's: Finding#loop_wait); this order breaks ties. A new finding is one file in
    # rules/ (a subclass of Rule that declares its kinds: Rule.kind) and one entry here.
    RULES = [Rules::Convoy, Rules::Hog, Rules::LongHold, Rules::Contention, Rules::HandOff, Rules::GarbageCollection,
             Rules::LoopStall].freeze

    # Every kind of finding, { name => FindingKind }, in RULES' order: what the outputs that list
    # kinds (help, legends, the HTML report's holders, `gvlscope top`'s header) read.
    KINDS = RULES.flat_map(&:kinds).to_h { |kind| [kind.name, kind] }.freeze
  end
end
