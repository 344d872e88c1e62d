# frozen_string_literal: true

require_relative "../support/vocabulary"

module GVLScope
  module Model
    autoload :Record, File.expand_path("record", __dir__) # with the engine's extension: on first use

    # Writes a .gvl trace (docs/format.md, version 3, no stacks) from events given in time order:
    # how an importer (GVLTracing.convert) hands another tool's trace to the report engine without
    # keeping its events. Memory: one buffer of CHUNK_RECORDS records per native thread (lane).
    #
    # The engine merges the lanes by time and breaks ties by file order. Events given in time
    # order keep their order: when an event has the time of the one before it on another lane,
    # that lane's pending records go to the file first.
    class GvlWriter
      MAGIC = "GVLSCOPE"
      VERSION = 3
      HEADER = "a8L<L<Q<Q<L<L<L<L<"
      HEADER_BYTES = 48
      CHUNK_RECORDS = 8192
      # The events' numbers (ext/gvlscope/format.h's, through Vocabulary::EVENT_KINDS): not ARG, SAMPLE and turns.
      KIND_CODES = Vocabulary::EVENT_KINDS.each_with_index.to_h.except(nil, :arg, :sample, :turn_begin, :turn_end, :turn_site, :turn_ready).freeze
      # A record keeps Record::MAX_DELTA (2^36 - 1) ns after its chunk's base; sealing at 2^34
      # keeps each record a Fixnum (no Bignum per event).
      MAX_DELTA_NS = 1 << 34
      MAX_TIME_NS = 1 << 62

      attr_reader :events

      # +io+: a binary IO, written from its current position (the start of the file).
      def initialize(io, pid:, timeslice_ns:)
        @io = io
        @lanes = {} # native serial => [base_ns, last_ns, records]
        @events = 0
        @last_time = nil
        @last_lane = nil
        io.write([MAGIC, VERSION, HEADER_BYTES, 0, 0, pid, timeslice_ns / 1000, 0, 0].pack(HEADER))
      end

      # One event of thread +serial+ (1..Record::MAX_VALUE) at +time_ns+ (0 <= time < 2^62, not before the
      # previous event's), recorded on native thread +native+ (its lane; the thread's own by default).
      def add(time_ns, kind, serial, native = serial)
        lane = @lanes[native] ||= [time_ns, time_ns, []]
        flush_ties(time_ns, native) if time_ns == @last_time && native != @last_lane
        flush(native, lane) if lane[2].size >= CHUNK_RECORDS || time_ns - lane[0] >= MAX_DELTA_NS
        lane[0] = time_ns if lane[2].empty?
        lane[1] = time_ns
        lane[2] << Record.pack(KIND_CODES.fetch(kind), serial, time_ns - lane[0])
        @events += 1
        @last_time = time_ns
        @last_lane = native
      end

      # A CPU chunk: at +time_ns+ the drain thread sampled the native threads' CPU time, +cpu_ns+
      # { native serial => its CPU ns then } (those whose CPU time changed since their previous sample).
      def cpu(time_ns, cpu_ns)
        body = [time_ns, cpu_ns.size, 0].pack("Q<L<L<") + cpu_ns.map { |native, ns| [native, 0, ns].pack("L<L<Q<") }.join
        @io.write([5, body.bytesize].pack("L<L<"), body)
      end

      # Writes what is pending, the thread table (+threads+: ThreadInfo, names in UTF-8) and the end
      # record (with the machine's +cpus+ and highest load x 1000, +load_milli+, when given); the
      # caller closes the IO.
      def finish(threads:, end_ns:, cpus: nil, load_milli: 0)
        @lanes.each { |native, lane| flush(native, lane) }
        body = threads.map do |info|
          name = info.name.to_s.b
          flags = (info.main ? 1 : 0) | (info.exited ? 2 : 0)
          [info.serial, info.ractor_id.to_i, flags, name.bytesize, 0].pack("L<5") << name
        end.join.b
        @io.write([2, body.bytesize].pack("L<L<"), body)
        return @io.write([3, 24, end_ns, @events, 0].pack("L<L<Q<Q<Q<")) unless cpus

        @io.write([3, 32, end_ns, @events, 0, cpus, load_milli].pack("L<L<Q<Q<Q<L<L<"))
      end

      private

      # Another lane's records at this very time go to the file before this one's: ties keep order.
      def flush_ties(time_ns, native)
        @lanes.each { |other, lane| flush(other, lane) if other != native && lane[1] == time_ns }
      end

      def flush(native, lane)
        records = lane[2]
        return if records.empty?

        @io.write([1, 24 + 8 * records.size, native, native, lane[0], records.size, 0].pack("L<L<L<L<Q<L<L<"),
                  records.pack("Q<*"))
        records.clear
      end
    end
  end
end
