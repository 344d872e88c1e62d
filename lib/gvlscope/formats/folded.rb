# frozen_string_literal: true

require_relative "format"
require_relative "../support/errors"
require_relative "../analysis/stack_profile"

module GVLScope
  module Formats
    # A trace (Model::Scan) -> folded stacks (Brendan Gregg's format, read by flamegraph.pl, inferno and
    # speedscope): the wait-weighted profile of holders, the code that held the GVL while others
    # waited. One line per distinct stack, frames root first joined by ";", a space, its weight:
    # the number of waiting threads summed over the samples of that stack.
    #
    #   block in <main> (app.rb:4);Counter#spin (lib/counter.rb:8) 412
    #
    # A frame is "Label (path:line)", or the label alone for a C method. No thread frame is put
    # at the root: the same code run by several threads (Puma's workers) stays one tower.
    class Folded < Format
      # Raises GVLScope::Error for a trace without stacks, before any byte is written: an empty
      # file would read as "no thread made another wait".
      def initialize(timeline)
        super
        return if timeline.stacks?

        raise Error, "#{timeline.file.path}: no stacks recorded (traced with --no-stacks, or not a gvlscope v2 trace)"
      end

      def write(io)
        lines = Hash.new(0)
        Analysis::StackProfile.new(@subject.samples).stacks.each do |stack, weight|
          lines[stack.reverse_each.map { |frame| frame_text(frame) }.join(";")] += weight
        end
        # Sorted: the output of a trace is the same bytes every time (test/engine/golden_test.rb).
        lines.sort.each { |stack, weight| io << stack << " " << weight.to_s << "\n" }
        io
      end

      private

      # ";" separates frames and a newline ends a stack: neither may appear inside one.
      def frame_text(frame) = frame.to_s.tr(";\n", ",")
    end
  end
end
