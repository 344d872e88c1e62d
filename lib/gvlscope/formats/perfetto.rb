# frozen_string_literal: true

require_relative "format"
require_relative "protobuf_wire"
require_relative "../support/vocabulary"

module GVLScope
  module Formats
    # A trace (Model::Scan) -> Perfetto protobuf trace (.pftrace), hand-encoded: a process track per Ractor,
    # a thread track per Ruby thread with a slice per state, under it a track of the fibers its
    # event loop gave turns to (a slice per turn, "fiber N": traces with turns, docs/fibers.md), a
    # counter track of threads waiting for the GVL, and a "native threads" process whose tracks
    # show which Ruby thread each ran.
    # Field numbers are Perfetto's (protos/perfetto/trace/perfetto_trace.proto); the test suite
    # decodes our output with protoc against ../shared/perfetto/perfetto_trace.desc.
    #
    # The slices and the counter's packets come from the native engine (Model::Scan's writers,
    # ext/gvlscope_engine/output.c), streamed to the io.
    class Perfetto < Format
      include ProtobufWire
      # TracePacket
      TIMESTAMP = 8
      SEQUENCE_ID = 10
      TRACK_EVENT = 11
      TRACK_DESCRIPTOR = 60
      # TrackDescriptor
      UUID = 1
      TRACK_NAME = 2
      PROCESS = 3
      THREAD = 4
      PARENT_UUID = 5
      COUNTER = 8
      # ProcessDescriptor / ThreadDescriptor
      PID = 1
      TID = 2
      PROCESS_NAME = 6
      THREAD_NAME = 5
      # TrackEvent
      EVENT_TYPE = 9
      TRACK_UUID = 11
      EVENT_NAME = 23
      COUNTER_VALUE = 30
      SLICE_BEGIN = 1
      SLICE_END = 2
      COUNTER_EVENT = 4
      SEQUENCE = 1
      NATIVE_PID_OFFSET = 1_000_000

      def write(io)
        @sink = io
        io = @out = +"".b
        pid = timeline.file.pid
        timeline.ractors.each_key do |ractor_id|
          packet(io, descriptor(process_uuid(ractor_id), PROCESS,
                                field_varint(PID, fake_pid(ractor_id)) +
                                field_string(PROCESS_NAME, ractor_id.zero? ? "pid #{pid}" : "Ractor #{ractor_id} (pid #{pid})")))
        end
        timeline.each_thread do |thread|
          uuid = thread_uuid(thread.serial)
          packet(io, descriptor(uuid, THREAD,
                                field_varint(PID, fake_pid(thread.ractor_id)) + field_varint(TID, thread.serial) +
                                field_string(THREAD_NAME, thread.display_name),
                                parent: process_uuid(thread.ractor_id)))
          stream(:perfetto_slices, thread.serial, uuid)
          write_turns(io, thread, uuid)
        end
        write_counter(io)
        write_native_lanes(io)
        @sink << @out
        @sink
      end

      private

      def timeline = @subject

      # The engine's packets go straight to the sink, after what is buffered here.
      def stream(writer, *arguments)
        @sink << @out
        @out.clear
        engine_write(@sink, writer, *arguments)
      end

      def fake_pid(ractor_id) = timeline.file.pid * 10 + ractor_id
      def process_uuid(ractor_id) = 1_000 + ractor_id
      def thread_uuid(serial) = 1_000_000 + serial
      def native_uuid(serial) = 2_000_000_000 + serial
      def fibers_uuid(serial) = 3_000_000_000 + serial

      # The loop's turns on a track of their own under the thread's: they overlap its GVL states.
      def write_turns(io, thread, thread_uuid)
        turns = turns_by_thread[thread.serial] or return

        uuid = fibers_uuid(thread.serial)
        packet(io, field_bytes(TRACK_DESCRIPTOR, field_varint(UUID, uuid) + field_varint(PARENT_UUID, thread_uuid) +
                                                 field_string(TRACK_NAME, "#{thread.display_name}: fibers")))
        turns.each do |turn|
          packet(io, field_varint(TIMESTAMP, turn.start_ns) +
                     field_bytes(TRACK_EVENT, field_varint(EVENT_TYPE, SLICE_BEGIN) + field_varint(TRACK_UUID, uuid) +
                                              field_string(EVENT_NAME, "fiber #{turn.fiber}")))
          packet(io, field_varint(TIMESTAMP, turn.end_ns) +
                     field_bytes(TRACK_EVENT, field_varint(EVENT_TYPE, SLICE_END) + field_varint(TRACK_UUID, uuid)))
        end
      end

      def turns_by_thread = @turns_by_thread ||= (timeline.respond_to?(:turns) ? timeline.turns : []).group_by(&:thread)
      COUNTER_UUID = 42

      def write_counter(io)
        body = field_varint(UUID, COUNTER_UUID) + field_string(TRACK_NAME, "threads waiting for the GVL") +
               field_bytes(COUNTER, "") + field_varint(PARENT_UUID, process_uuid(timeline.ractors.keys.min || 0))
        packet(io, field_bytes(TRACK_DESCRIPTOR, body))
        stream(:perfetto_counter)
      end

      def write_native_lanes(io)
        tids = timeline.file.native_tids
        return if tids.empty? || !timeline.shared_native_threads?

        native_pid = timeline.file.pid + NATIVE_PID_OFFSET
        packet(io, descriptor(process_uuid(-1), PROCESS, field_varint(PID, native_pid) +
                                                      field_string(PROCESS_NAME, "native threads")))
        tids.each do |serial, tid|
          packet(io, descriptor(native_uuid(serial), THREAD,
                                field_varint(PID, native_pid) + field_varint(TID, tid) +
                                field_string(THREAD_NAME, "native thread #{serial} (tid #{tid})"),
                                parent: process_uuid(-1)))
        end
        timeline.each_thread do |thread|
          stream(:perfetto_native, thread.serial, thread.display_name.encode(Encoding::UTF_8).b)
        end
      end

      def descriptor(uuid, kind, kind_body, parent: nil)
        body = field_varint(UUID, uuid)
        body << field_varint(PARENT_UUID, parent) if parent
        body << field_bytes(kind, kind_body)
        field_bytes(TRACK_DESCRIPTOR, body)
      end

      def packet(io, body)
        body << field_varint(SEQUENCE_ID, SEQUENCE)
        io << field_bytes(1, body) # Trace.packet = 1
      end
    end
  end
end
