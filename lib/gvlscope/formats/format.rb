# frozen_string_literal: true

module GVLScope
  module Formats
    # The one interface of every output: built from its subject (a Model::Scan, an
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

      private

      # +stack+ (interned frames, innermost first) as outputs name its frames: Model::Frame#shown,
      # once per distinct frame.
      def shown_stack(stack) = stack.map { |frame| (@shown_frames ||= {}.compare_by_identity)[frame] ||= frame.shown }

      # Appends to +io+ what a Model::Scan writer (+writer+, its +arguments+; of +scan+, the
      # subject unless given) makes: straight to a file's descriptor (no Ruby String on the way: an
      # export of 10 GB stays a few MB of memory), else in pieces of ~1 MB given to io#<<.
      def engine_write(io, writer, *arguments, scan: @subject)
        fd = io.fileno if io.is_a?(IO)
        if fd
          io.flush
          return scan.public_send(writer, *arguments, fd)
        end

        scan.public_send(writer, *arguments, nil) { |chunk| io << chunk }
      end
    end
  end
end
