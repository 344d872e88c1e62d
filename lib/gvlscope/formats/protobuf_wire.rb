# frozen_string_literal: true

module GVLScope
  module Formats
    # Protocol Buffers' wire format, the little of it the hand-encoded exports (Perfetto, pprof)
    # need: no runtime gem, and every byte is ours to test.
    module ProtobufWire
      private

      def varint(value)
        raise ArgumentError, "negative varint #{value}" if value.negative?

        out = +"".b
        while value >= 0x80
          out << ((value & 0x7f) | 0x80)
          value >>= 7
        end
        out << value
      end

      def field_varint(number, value) = varint(number << 3) << varint(value)

      # A length-delimited field (wire type 2): bytes, a string, an embedded message.
      def field_bytes(number, bytes)
        bytes = bytes.b
        varint((number << 3) | 2) << varint(bytes.bytesize) << bytes
      end

      def field_string(number, string) = field_bytes(number, string.encode(Encoding::UTF_8))
    end
  end
end
