# frozen_string_literal: true

require_relative "../test_helper"
require "gvlscope/support/units"

# Units.median: the one median of the report, the lab and the benchmarks.
class MedianTest < Minitest::Test
  def test_the_upper_middle_always_one_of_the_values
    assert_equal 3, GVLScope::Units.median([5, 1, 3])
    assert_equal 4, GVLScope::Units.median([4, 1, 3, 9]) # not 3.5: an integer stays an integer
    assert_equal 7, GVLScope::Units.median([7])
  end

  def test_none_when_there_are_no_values
    assert_nil GVLScope::Units.median([])
    assert_equal 0, GVLScope::Units.median([], none: 0)
    assert_equal 0, GVLScope::Analysis.median([]) # the report's: 0 ns when a thread never waited
  end
end
