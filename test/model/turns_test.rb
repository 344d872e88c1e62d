# frozen_string_literal: true

require_relative "../test_helper"
require "gvlscope/model"

# Model::Turns pairs a trace's turn records (format version 4) into turns, deterministically.
class TurnsTest < Minitest::Test
  MS = 1_000_000

  def build(records, end_ns: 100 * MS) = GVLScope::Model::Turns.build(records, end_ns: end_ns, stack: ->(id) { [:stack, id] })

  def test_turns_pair_per_thread_and_a_site_belongs_to_the_fibers_previous_turn
    turns = build([[0, 1, :turn_begin, 7], [1 * MS, 2, :turn_begin, 9], [20 * MS, 1, :turn_end, 0],
                   [21 * MS, 2, :turn_end, 0], [30 * MS, 1, :turn_begin, 7], [30 * MS, 1, :turn_site, 5],
                   [31 * MS, 1, :turn_end, 0]])
    assert_equal [[1, 7, 0, 20 * MS], [2, 9, 1 * MS, 21 * MS], [1, 7, 30 * MS, 31 * MS]],
                 turns.map { |turn| [turn.thread, turn.fiber, turn.start_ns, turn.end_ns] }
    assert_equal [[:stack, 5], nil, nil], turns.map(&:site)
  end

  def test_an_end_without_its_begin_is_no_turn_and_a_turn_at_the_traces_end_is_open
    turns = build([[0, 1, :turn_end, 0], [5 * MS, 1, :turn_begin, 3]], end_ns: 50 * MS)
    assert_equal [[5 * MS, 50 * MS, true]], turns.map { |turn| [turn.start_ns, turn.end_ns, turn.open] }
  end

  # Followers: the other fibers' turns that began back to back after a long turn, until the loop
  # came back later than BACK_TO_BACK_NS (it waited for something).
  def test_followers_are_the_back_to_back_turns_after_a_long_one
    gap = GVLScope::Model::Turns::BACK_TO_BACK_NS
    records = [[0, 1, :turn_begin, 1], [30 * MS, 1, :turn_end, 0],
               [30 * MS + gap, 1, :turn_begin, 2], [31 * MS + gap, 1, :turn_end, 0],
               [31 * MS + 2 * gap, 1, :turn_begin, 1], [32 * MS + 2 * gap, 1, :turn_end, 0], # its own: not a follower
               [32 * MS + 3 * gap + 1, 1, :turn_begin, 3], [33 * MS + 3 * gap, 1, :turn_end, 0]] # after a wait
    turns = build(records)
    assert_equal [2], turns.first.followers.map(&:fiber)
    assert_empty turns[1].followers, "short turns get none"
  end

  # A fiber always ready (it yields at once, again and again) takes turn after turn right after a
  # long one: it waited once, and what comes after its second turn did not wait for the long one.
  def test_a_fibers_second_turn_ends_the_followers
    records = [[0, 1, :turn_begin, 1], [30 * MS, 1, :turn_end, 0]]
    at = 30 * MS
    [2, 3, 2, 4, 2].each do |fiber|
      records << [at + 1, 1, :turn_begin, fiber] << [at + 2, 1, :turn_end, 0]
      at += 2
    end
    assert_equal [2, 3], build(records).first.followers.map(&:fiber)
  end
end
