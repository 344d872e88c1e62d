# frozen_string_literal: true

require "gvlscope/model"

# The test oracle's reader: a trace read whole into Ruby, every event in parallel arrays (what
# reference_timeline.rb, the plain-Ruby state machine the engine is checked against, reads, and
# what the tests read a trace's records with). gvlscope itself reads through the engine
# (Model::Scan, TraceFile.index), with the same checks and messages.
module GVLScope
  module Model
    # The events of the trace at +path+, whichever tool wrote it, read whole into Ruby.
    def self.read(path)
      GVLTracing.json?(path) ? GVLTracing.read(path) : TraceFile.read(path)
    end

    class TraceFile
      # Lane records that are not events (format.h): ARG carries a value for the record before it
      # in its lane (a SUSPENDED's release site, a SAMPLE's stack, a TURN_BEGIN's fiber, a
      # TURN_SITE's stack, a TURN_READY's microseconds); SAMPLE is a holder sample; TURN_* are event
      # loops' turns (version 4; TURN_READY 5).
      EVENTS = KINDS.take(KINDS.index(:gc_exit) + 1).freeze
      ARG = KINDS.index(:arg)
      SAMPLE = KINDS.index(:sample)
      SUSPENDED = KINDS.index(:suspended)
      TURN_KINDS = (KINDS.index(:turn_begin)..KINDS.index(:turn_ready)).freeze

      def self.read(path)
        new(path).tap(&:read)
      end

      # The event loops' turn records (version 4) of a file #read whole, in time order:
      # [[time_ns, thread serial, kind (:turn_begin, :turn_end, :turn_site, :turn_ready), value], ...]
      # (value: the fiber's serial after TURN_BEGIN, the stack id after TURN_SITE, microseconds after
      # TURN_READY, else 0); none in a file not read whole. An indexed file's
      # are the engine's (Engine::Index#turns).
      def raw_turns = @raw_turns || []

      def read
        @raw_turns = []
        data = @data = File.binread(@path)
        read_header(data, data.bytesize)
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
          if type == CHUNK_EVENTS
            read_events(data, offset, payload_bytes, times, metas)
          else
            read_chunk(type, data, offset, payload_bytes)
          end
          offset = payload_start + payload_bytes
        end
        @data = nil
        @raw_samples.sort_by!(&:first)
        # Ties keep file order (a TURN_SITE has its TURN_BEGIN's time).
        @raw_turns = @raw_turns.each_with_index.sort_by { |(time, *), i| [time, i] }.map!(&:first)
        sort_events(times, metas)
        @dropped = @end_dropped if @end_dropped
        @threads.uniq.each { |serial| @thread_info[serial] ||= ThreadInfo.new(serial: serial, name: nil, ractor_id: 0) }
        Model.mark_namesakes(@thread_info.values)
        self
      end

      private

      # Appends the chunk's times and, per event, its Record.meta (kind, thread serial and native
      # thread's serial in one Integer). Whole-array operations, no per-event objects: a trace
      # holds millions of events.
      # Every length is checked against the chunk's size before anything is allocated for it.
      def read_events(data, offset, bytes, times, metas)
        start = offset + 8
        corrupt!(offset, "event chunk of #{bytes} bytes, shorter than its header") if bytes < EVENTS_HEADER_BYTES
        native, tid, base, count, dropped_before = data.unpack("L<L<Q<L<L<", offset: start - @base)
        if EVENTS_HEADER_BYTES + count * 8 != bytes
          corrupt!(offset, "event chunk of #{bytes} bytes claims #{count} records")
        end
        corrupt!(offset, "event chunk starts at #{base} ns (over 146 years)") if base >= MAX_TIME_NS

        (@record_offsets ||= []) << [times.size, start + EVENTS_HEADER_BYTES] # to name a bad record's byte
        @native_tids[native] = tid
        @dropped += dropped_before
        records = data.unpack("Q<#{count}", offset: start + EVENTS_HEADER_BYTES - @base)
        return read_events_with_stacks(records, base, native, times, metas) if args?

        times.concat(records.map { |record| base + Record.delta(record) })
        metas.concat(records.map { |record| Record.meta(record, native) })
      end

      # The same, taking out the records that are not events: an ARG belongs to the record before
      # it in the same lane (native thread), possibly the last of the lane's previous chunk.
      def read_events_with_stacks(records, base, native, times, metas)
        @last_in_lane ||= {}
        last = @last_in_lane[native]
        records.each do |record|
          kind = Record.kind(record)
          time = base + Record.delta(record)
          serial = Record.value(record)
          @stack_records = (@stack_records || 0) + 1 if kind >= ARG
          if kind == ARG
            if last && last[0] == SUSPENDED
              @site_ids[TraceFile.site_key(last[2], last[1])] = serial
            elsif last && last[0] == SAMPLE
              @raw_samples << [last[2], last[1], serial]
            elsif last && TURN_KINDS.cover?(last[0])
              last[3][3] = serial
            end
            last = nil
            next
          end
          last = [kind, serial, time]
          next if kind == SAMPLE

          if TURN_KINDS.cover?(kind)
            @raw_turns << (last[3] = [time, serial, KINDS[kind], 0])
            next
          end

          times << time
          metas << Record.meta(record, native)
        end
        @last_in_lane[native] = last
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
        # Records that are not events (ARG, SAMPLE) were taken out above; one left here is corrupt.
        @kinds = metas.map { |meta| EVENTS[Record.kind(meta)] }
        if (bad = @kinds.index(nil))
          corrupt!(record_offset(order[bad]), "unknown event kind #{Record.kind(metas[bad])}")
        end
        @threads = metas.map { |meta| Record.value(meta) }
        @natives = metas.map { |meta| Record.meta_native(meta) }
      end
    end
  end
end
