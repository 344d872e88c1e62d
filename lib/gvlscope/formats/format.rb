# frozen_string_literal: true

module GVLScope
  module Formats
    # The one interface of every output: built from its subject (a Model::Timeline, an
    # Analysis::Report, a Metrics::Snapshot, lab results: Formats::REGISTRY says which), #write(io)
    # appends the bytes to an IO or a String and returns it. Big outputs append in pieces of
    # FLUSH_BYTES, so huge traces neither build one giant String nor pay a method call per tiny write.
    class Format
      FLUSH_BYTES = 1 << 20

      attr_reader :subject

      def initialize(subject)
        @subject = subject
      end

      def write(io)
        raise NotImplementedError, "#{self.class} must define #write(io)"
      end

      # The whole output as a String.
      def to_s = write(+"")
    end
  end
end
