# frozen_string_literal: true

require_relative "analysis/report"

module GVLScope
  # Data becomes answers: per-thread stats (ThreadStats), histograms, who held the GVL while
  # others waited (Blame), and the finding rules (RULES, one file each in analysis/rules/),
  # gathered by Report.
  module Analysis
  end
end
