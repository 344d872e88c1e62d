# frozen_string_literal: true

require_relative "../model/trace_file"

module GVLScope
  module Analysis
    # The wait-weighted profile of holders as whole stacks, for the viewers that draw stacks
    # (folded stacks, the HTML report's flame graph). CodeLocations#holder_profile ranks single
    # frames for the text report; this keeps every frame of each sample. A sample's weight is the
    # number of threads that waited while it was taken.
    class StackProfile
      # What the capped tree puts in place of the nodes it leaves out.
      OTHER = Model::Frame.new("(other)", nil, 0).freeze

      # A node of the call tree: +frame+ (nil at the root), +weight+ (its samples and its
      # descendants'), +children+ heaviest first.
      Node = Struct.new(:frame, :weight, :children, :depth)

      # +samples+: Model::Sample (Model::Scan#samples, or a selection of them).
      def initialize(samples)
        @samples = samples
      end

      # Each distinct stack once (innermost first), its frames as outputs name them
      # (Model::Frame#shown), with its samples' waiters summed: [[stack, weight], ...] in the
      # order first seen.
      def stacks
        @stacks ||= begin
          # Stacks are interned by the trace reader (one frozen Array per stack id): grouped by
          # identity first, so a million samples hash a handful of Arrays, not a million.
          by_identity = {}.compare_by_identity
          @samples.each { |sample| by_identity[sample.stack] = by_identity.fetch(sample.stack, 0) + sample.waiters }
          shown = {}.compare_by_identity # a frame (interned too) => its shown frame
          by_identity.each_with_object(Hash.new(0)) do |(stack, weight), merged|
            merged[stack.map { |frame| shown[frame] ||= frame.shown }] += weight
          end.to_a
        end
      end

      def weight = stacks.sum(&:last)

      # The call tree, root first (the root's frame is nil), with at most +max_nodes+ nodes: the
      # heaviest nodes are kept and what a kept node loses is merged into one OTHER child, so the
      # weights still add up. Children are ordered heaviest first, then by frame.
      def tree(max_nodes: 2000)
        root = Node.new(nil, 0, {}, 0)
        stacks.each do |stack, weight|
          node = root
          node.weight += weight
          stack.reverse_each do |frame|
            node = node.children[frame] ||= Node.new(frame, 0, {}, node.depth + 1)
            node.weight += weight
          end
        end
        kept = kept_nodes(root, max_nodes)
        prune(root, kept)
        root
      end

      private

      # The nodes to keep, heaviest first: a child weighs no more than its parent (and a tie puts
      # the shallower first), so each kept node's parent is kept before it. Every kept node that
      # loses a child gains an OTHER child; the count of both stays within +max_nodes+.
      def kept_nodes(root, max_nodes)
        all = []
        queue = [root]
        until queue.empty?
          node = queue.shift
          all << node
          queue.concat(node.children.values)
        end
        kept = {}.compare_by_identity
        if all.size <= max_nodes
          all.each { |node| kept[node] = true }
          return kept
        end

        kept[root] = true
        # Kept nodes' children not kept yet: a kept node with any needs an OTHER node.
        left_out = { root => root.children.size }.compare_by_identity
        others = root.children.empty? ? 0 : 1
        parents = {}.compare_by_identity
        all.each { |node| node.children.each_value { |child| parents[child] = node } }
        candidates = all.drop(1).sort_by.with_index { |node, index| [-node.weight, node.depth, index] }
        candidates.each do |node|
          parent = parents[node]
          # The parent loses its OTHER when this was its last child left out; the node gains one
          # when it has children.
          change = 1 - (left_out[parent] == 1 ? 1 : 0) + (node.children.empty? ? 0 : 1)
          break if kept.size + others + change > max_nodes

          kept[node] = true
          left_out[parent] -= 1
          others -= 1 if left_out[parent].zero?
          left_out[node] = node.children.size
          others += 1 unless node.children.empty?
        end
        kept
      end

      # Drops the nodes not in +kept+ (their weight goes to their parent's OTHER child) and turns
      # children into Arrays, heaviest first.
      def prune(node, kept)
        children = node.children.values.select { |child| kept.include?(child) }
        left_out = node.children.each_value.sum(&:weight) - children.sum(&:weight)
        children.sort_by! { |child| [-child.weight, child.frame.to_a.map(&:to_s)] }
        children << Node.new(OTHER, left_out, [], node.depth + 1) if left_out.positive?
        node.children = children
        children.each { |child| prune(child, kept) unless child.frame.equal?(OTHER) }
      end
    end
  end
end
