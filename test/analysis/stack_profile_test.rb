# frozen_string_literal: true

require "test_helper"
require "gvlscope/analysis/stack_profile"

# Analysis::StackProfile on made-up samples whose answers are known: identical stacks merge, and
# the capped call tree (what the HTML report embeds) keeps the heaviest nodes within the cap,
# the rest merged into "(other)" so no weight is lost.
class StackProfileTest < Minitest::Test
  Frame = GVLScope::Model::Frame
  Sample = GVLScope::Model::Sample
  OTHER = GVLScope::Analysis::StackProfile::OTHER

  def stack(*labels) = labels.map { |label| Frame.new(label, "app.rb", 1) }.reverse.freeze # given root first

  def test_identical_stacks_merge_with_their_waiters_summed
    hot = stack("main", "Worker#run", "Counter#spin")
    cold = stack("main", "Worker#run", "IO#read")
    samples = [Sample.new(1, 2, hot, 1), Sample.new(2, 2, cold, 2), Sample.new(3, 3, hot.dup, 3)]
    profile = GVLScope::Analysis::StackProfile.new(samples)
    assert_equal [[hot, 4], [cold, 2]], profile.stacks
    assert_equal 6, profile.weight

    root = profile.tree
    assert_nil root.frame
    assert_equal 6, root.weight
    run = root.children.first.children.first
    assert_equal ["Worker#run", 6], [run.frame.label, run.weight]
    assert_equal [["Counter#spin", 4], ["IO#read", 2]], run.children.map { |node| [node.frame.label, node.weight] }
  end

  def test_the_tree_is_capped_and_keeps_every_weight
    random = Random.new(17)
    samples = Array.new(3000) do |index|
      labels = Array.new(random.rand(1..8)) { |depth| "m#{random.rand(0..depth + 3)}" }
      Sample.new(index, 1, stack(*labels), random.rand(1..3))
    end
    profile = GVLScope::Analysis::StackProfile.new(samples)
    full = paths(profile.tree(max_nodes: 1_000_000))
    assert_operator full.size, :>, 2000

    [2, 10, 500, 2000].each do |cap|
      capped = paths(profile.tree(max_nodes: cap))
      # Keeping a node costs one more for its "(other)" child when it has children: the greedy
      # cut stops at most one node short.
      assert_includes (cap - 1)..cap, capped.size
      assert_equal profile.weight, capped.fetch([])[:weight]
      others = capped.keys.select { |path| path.last == OTHER }
      refute_empty others
      capped.each do |path, node|
        assert_operator node[:children], :<=, node[:weight], path.inspect
        next if path.last == OTHER

        # A kept node is the node of the full tree: its weight, and its own samples (weight
        # not in a child) stay its own.
        assert_equal full.fetch(path).values_at(:weight, :own), node.values_at(:weight, :own), path.inspect
      end
      # The heaviest nodes are the ones kept.
      lightest_kept = capped.reject { |path, _| path.last == OTHER }.values.map { |node| node[:weight] }.min
      heaviest_dropped = full.reject { |path, _| capped.key?(path) }.values.map { |node| node[:weight] }.max
      assert_operator lightest_kept, :>=, heaviest_dropped
    end
  end

  private

  # { [frames from the root] => {weight:, children: (their weights summed), own:} } of a tree.
  def paths(node, path = [], into = {})
    children = node.children.sum(&:weight)
    into[path] = { weight: node.weight, children: children, own: node.weight - children }
    node.children.each { |child| paths(child, path + [child.frame], into) }
    into
  end
end
