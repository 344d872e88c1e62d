# frozen_string_literal: true

require_relative "../errors"
require_relative "../vocabulary"

module GVLScope
  module Model
    # What the trace says about one Ruby thread.
    ThreadInfo = Struct.new(:serial, :name, :ractor_id, :main, :exited, keyword_init: true) do
      def label = Vocabulary.thread_label(name, serial, main: main)
    end

    # Reads a native .gvl trace (see docs/format.md and ext/gvlscope/format.h) into time-ordered
    # events. A file cut short reads up to its last whole chunk (truncated? is then true).
    class TraceFile
      MAGIC = "GVLSCOPE"
      VERSION = 1
      KINDS = Vocabulary::EVENT_KINDS
      CHUNK_EVENTS = 1
      CHUNK_THREADS = 2
      CHUNK_END = 3
      HEADER = "a8L<L<Q<Q<L<L<" # magic version header_bytes start_mono start_real pid timeslice_us
      HEADER_BYTES = 40
      EVENTS_HEADER_BYTES = 24
      THREAD_RECORD_BYTES = 16
      END_BYTES = 24
      # No time in a trace is 2^62 ns (146 years) or more: a larger one is corruption, and refused
      # before it reaches the 64 log2 buckets of every histogram.
      MAX_TIME_NS = 2**62

      # Events in time order, as parallel arrays (a trace holds millions: no object per event).
      #   times[i]   ns since the trace started
      #   kinds[i]   a symbol of KINDS
      #   threads[i] the Ruby thread's serial
      #   natives[i] the native thread's serial (the lane it was recorded on)
      attr_reader :path, :pid, :start_realtime_ns, :timeslice_ns, :times, :kinds, :threads, :natives,
                  :thread_info, :native_tids, :end_ns, :dropped, :warnings

      def self.read(path)
        new(path).tap(&:read)
      end

      def initialize(path)
        @path = path
        @thread_info = {}
        @native_tids = {}
        @warnings = []
        @dropped = 0
      end

      # A trace built from another tool's events (model/gvl_tracing.rb): the same arrays as a
      # .gvl file gives, already in time order.
      def self.from_events(path:, pid:, timeslice_ns:, times:, kinds:, threads:, thread_info:, end_ns:)
        new(path).tap do |file|
          file.instance_eval do
            @pid = pid
            @timeslice_ns = timeslice_ns
            @times = times
            @kinds = kinds
            @threads = threads
            @natives = threads # one native thread per Ruby thread: the other tools do not record them
            @thread_info = thread_info
            @end_ns = end_ns
          end
        end
      end

      def truncated?
        @end_ns.nil?
      end

      def size
        @times.size
      end

      def duration_ns
        @end_ns || @times.last || 0
      end

      def read
        data = File.binread(@path)
        read_header(data)
        times = []
        metas = []
        offset = @header_bytes
        while offset < data.bytesize
          if offset + 8 > data.bytesize
            warn_truncated(offset)
            break
          end
          type, payload_bytes = data.unpack("L<L<", offset: offset)
          payload_start = offset + 8
          if payload_start + payload_bytes > data.bytesize
            warn_truncated(offset)
            break
          end
          case type
          when CHUNK_EVENTS then read_events(data, offset, payload_bytes, times, metas)
          when CHUNK_THREADS then read_threads(data, offset, payload_bytes)
          when CHUNK_END then read_end(data, offset, payload_bytes)
          else raise FormatError, "#{@path}: unknown chunk type #{type} at byte #{offset} (corrupt file?)"
          end
          offset = payload_start + payload_bytes
        end
        sort_events(times, metas)
        @dropped = @end_dropped if @end_dropped
        @threads.uniq.each { |serial| @thread_info[serial] ||= ThreadInfo.new(serial: serial, name: nil, ractor_id: 0) }
        self
      end

      private

      def read_header(data)
        raise FormatError, "#{@path}: empty file, not a gvlscope trace" if data.empty?
        unless data.start_with?(MAGIC)
          raise FormatError, "#{@path}: not a gvlscope trace (no #{MAGIC} magic at the start)"
        end
        raise FormatError, "#{@path}: truncated in its header (#{data.bytesize} bytes)" if data.bytesize < HEADER_BYTES

        _magic, version, @header_bytes, _mono, @start_realtime_ns, @pid, timeslice_us = data.unpack(HEADER)
        if version > VERSION
          raise FormatError, "#{@path}: format version #{version} is newer than this gvlscope reads (#{VERSION}); " \
                             "upgrade gvlscope"
        end
        raise FormatError, "#{@path}: bad header size #{@header_bytes}" if @header_bytes < HEADER_BYTES || @header_bytes > data.bytesize

        @timeslice_ns = timeslice_us * 1000
      end

      def warn_truncated(offset)
        @warnings << "#{@path}: file ends inside a chunk at byte #{offset} (process killed?); read what came before"
      end

      # Appends the chunk's times and, per event, a "meta" Integer: the record's low 28 bits (kind
      # and thread serial) with the native thread's serial above them. Whole-array operations, no
      # per-event objects: a trace holds millions of events.
      # Every length is checked against the chunk's size before anything is allocated for it.
      def read_events(data, offset, bytes, times, metas)
        start = offset + 8
        corrupt!(offset, "event chunk of #{bytes} bytes, shorter than its header") if bytes < EVENTS_HEADER_BYTES
        native, tid, base, count, dropped_before = data.unpack("L<L<Q<L<L<", offset: start)
        if EVENTS_HEADER_BYTES + count * 8 != bytes
          corrupt!(offset, "event chunk of #{bytes} bytes claims #{count} records")
        end
        corrupt!(offset, "event chunk starts at #{base} ns (over 146 years)") if base >= MAX_TIME_NS

        (@record_offsets ||= []) << [times.size, start + EVENTS_HEADER_BYTES] # to name a bad record's byte
        @native_tids[native] = tid
        @dropped += dropped_before
        records = data.unpack("Q<#{count}", offset: start + EVENTS_HEADER_BYTES)
        native_bits = native << 28
        times.concat(records.map { |record| base + (record >> 28) })
        metas.concat(records.map { |record| (record & 0xFFFFFFF) | native_bits })
      end

      def read_threads(data, chunk_offset, bytes)
        offset = chunk_offset + 8
        finish = offset + bytes
        while offset < finish
          corrupt!(offset, "thread record cut short by the end of its chunk") if offset + THREAD_RECORD_BYTES > finish
          serial, ractor_id, flags, name_bytes = data.unpack("L<L<L<L<", offset: offset)
          if offset + THREAD_RECORD_BYTES + name_bytes > finish
            corrupt!(offset, "thread name of #{name_bytes} bytes runs past the end of its chunk")
          end
          # Ruby takes any bytes as a thread name; every output (JSON, HTML, protobuf) needs UTF-8.
          name = data.byteslice(offset + THREAD_RECORD_BYTES, name_bytes).force_encoding(Encoding::UTF_8).scrub
          @thread_info[serial] = ThreadInfo.new(serial: serial, name: name.empty? ? nil : name, ractor_id: ractor_id,
                                                main: flags.anybits?(1), exited: flags.anybits?(2))
          offset += THREAD_RECORD_BYTES + name_bytes
        end
      end

      def read_end(data, offset, bytes)
        corrupt!(offset, "end record of #{bytes} bytes, not #{END_BYTES}") if bytes < END_BYTES
        @end_ns, _events, @end_dropped = data.unpack("Q<Q<Q<", offset: offset + 8)
        corrupt!(offset, "the trace ends at #{@end_ns} ns (over 146 years)") if @end_ns >= MAX_TIME_NS
      end

      # One line naming the file and where in it: a corrupt trace, not gvlscope's failure.
      def corrupt!(offset, problem)
        raise FormatError, "#{@path}: #{problem} at byte #{offset} (corrupt file?)"
      end

      # The byte at which the +index+th record read (in file order) starts.
      def record_offset(index)
        first, offset = @record_offsets.reverse_each.find { |chunk_first, _| chunk_first <= index }
        offset + (index - first) * 8
      end

      # Each native thread's chunks are in time order; across native threads they interleave.
      # Ties keep file order, which keeps each native thread's own order: the sort key is the time
      # with the event's index below it, one Integer per event (a Fixnum for traces up to ~18 minutes
      # of 4M events; longer ones still sort right, on Bignums).
      def sort_events(times, metas)
        count = times.size
        index_bits = [count.bit_length, 1].max
        mask = (1 << index_bits) - 1
        order = Array.new(count) { |i| (times[i] << index_bits) | i }.sort!.map! { |key| key & mask }
        @times = order.map { |i| times[i] }
        metas = order.map { |i| metas[i] }
        @kinds = metas.map { |meta| KINDS[meta & 15] }
        if (bad = @kinds.index(nil))
          corrupt!(record_offset(order[bad]), "unknown event kind #{metas[bad] & 15}")
        end
        @threads = metas.map { |meta| (meta >> 4) & 0xFFFFFF }
        @natives = metas.map { |meta| meta >> 28 }
      end
    end
  end
end
