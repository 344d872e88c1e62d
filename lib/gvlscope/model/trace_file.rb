# frozen_string_literal: true

require_relative "../support/errors"
require_relative "../support/vocabulary"
require_relative "../support/printable"

module GVLScope
  module Model
    autoload :Record, File.expand_path("record", __dir__) # with the engine's extension: on first use

    # What the trace says about one Ruby thread. +created_at+: where Thread.new was called
    # ("app.rb:12", Vocabulary.short_site of what Thread#inspect shows), or nil. +namesake+: true
    # when another thread of the trace has the same name (Model.mark_namesakes).
    ThreadInfo = Struct.new(:serial, :name, :ractor_id, :main, :exited, :created_at, :namesake, keyword_init: true) do
      def label = Vocabulary.thread_label(name, serial, main: main, created_at: created_at, namesake: namesake)
    end

    # Marks the named threads of +infos+ (ThreadInfo) that share their name with another, so each
    # label names one thread ("processor #7"); returns +infos+.
    def self.mark_namesakes(infos)
      infos.select(&:name).group_by(&:name).each_value do |same|
        same.each { |info| info.namesake = same.size > 1 }
      end
      infos
    end

    # A Ruby frame: +label+ as rb_profile_frame_full_label gives it ("Counter#spin", "IO#read"),
    # the +path+ of its file (nil for a C method) and the +line+ executing in it (the call site;
    # 0 when unknown). A stack is a frozen Array of Frame, innermost first.
    Frame = Struct.new(:label, :path, :line) do
      # "Counter#spin (lib/counter.rb:8)", or just the label of a C method.
      def to_s = path ? "#{label} (#{path}:#{line})" : label.to_s

      # The frame as every output names it, as thread labels read: its label without object
      # addresses (Vocabulary.code_label: "Rack::Builder#burn", not "#<Rack::Builder:0x…>.burn"),
      # its path shortened (Vocabulary.short_site: "puma-8.0.2/lib/puma/server.rb").
      def shown = Frame.new(Vocabulary.code_label(label), Vocabulary.short_site(path), line)
    end

    # The GVL holder's +stack+ sampled at +time_ns+ while +waiters+ (>= 1) threads of its Ractor
    # waited for the GVL. +thread+ is the holder's serial.
    Sample = Struct.new(:time_ns, :thread, :stack, :waiters)

    # Reads a native .gvl trace (see docs/format.md and ext/gvlscope/format.h) into time-ordered
    # events. A file cut short reads up to its last whole chunk (truncated? is then true).
    class TraceFile
      MAGIC = "GVLSCOPE"
      VERSION = 5 # 4: event loops' turn records; an ARG carries a value in any trace; 5: TURN_READY
      KINDS = Vocabulary::EVENT_KINDS
      CHUNK_EVENTS = 1
      CHUNK_THREADS = 2
      CHUNK_END = 3
      CHUNK_STACKS = 4
      CHUNK_CPU = 5 # version 3: the native threads' CPU time, sampled by the drain thread
      CPU_HEADER_BYTES = 16
      CPU_RECORD_BYTES = 16
      HEADER = "a8L<L<Q<Q<L<L<" # magic version header_bytes start_mono start_real pid timeslice_us
      HEADER_BYTES = 40
      EVENTS_HEADER_BYTES = 24
      THREAD_RECORD_BYTES = 16
      END_BYTES = 24
      MACHINE_BYTES = 8 # appended to the end record: u32 cpus, u32 highest 1-minute load x 1000
      # No time in a trace is 2^62 ns (146 years) or more: a larger one is corruption, and refused
      # before it reaches the 64 log2 buckets of every histogram.
      MAX_TIME_NS = 2**62
      STACKS_HEADER_BYTES = 40
      FLAG_STACKS = 1 # header flags (version 2, at byte 40)
      # Events in time order, as parallel arrays (a trace holds millions: no object per event).
      #   times[i]   ns since the trace started
      #   kinds[i]   a symbol of KINDS
      #   threads[i] the Ruby thread's serial
      #   natives[i] the native thread's serial (the lane it was recorded on)
      #
      # With stacks (stacks? true), code locations:
      #   site_ids    { TraceFile.site_key(time_ns, thread serial) of a SUSPENDED => stack id }
      #   raw_samples [[time_ns, thread serial, stack id], ...] in time order
      #   stack(id)   the stack (frozen Array of Frame), nil if the file has no table for it
      #   stack_counts { sites:, samples:, dropped:, unreadable: } as the recorder counted them
      #
      # CPU samples (version 3; empty before): cpu_ticks "q<" per CPU chunk (when the drain thread
      # sampled), cpu_samples "Q<Q<Q<" per record (native serial, time, the native thread's CPU ns
      # then): what Scan hands the engine to tell a hold's running time from its wall time.
      attr_reader :cpu_ticks, :cpu_samples
      attr_reader :path, :pid, :start_realtime_ns, :timeslice_ns, :times, :kinds, :threads, :natives,
                  :thread_info, :native_tids, :end_ns, :dropped, :warnings, :site_ids, :raw_samples, :stack_counts,
                  :machine

      # The machine while it recorded (the end record of traces written since it carries them; nil
      # before): CPUs online, the highest 1-minute load average seen.
      Machine = Struct.new(:cpus, :load) do
        # More runnable threads than CPUs: holds (wall time) include time the OS kept the holder off a CPU.
        def overloaded? = load > cpus
      end

      # The key of #site_ids: a SUSPENDED's time and thread serial in one Integer.
      def self.site_key(time_ns, serial) = time_ns << Record::VALUE_BITS | serial

      # The file's header, thread table, stacks and end record, and an index of its event chunks
      # (#chunk_index), without reading a single event: what Model::Scan needs before the native
      # engine reads the events (twice: GVLScope::Engine::Index, then a Pass). The same checks
      # and messages as the tests' whole-file reader (#read, test/support/whole_trace.rb), in the
      # same order, but for the records' kinds (the engine's).
      def self.index(path)
        new(path).tap(&:index)
      end

      # Event chunks as the engine reads them: "Q<Q<Q<" per chunk (offset of its records, base_ns,
      # count | native serial << 32), in file order. nil for a file read whole (from_events, the tests' #read).
      attr_reader :chunk_index

      def initialize(path)
        @path = path
        @base = 0 # the file offset of @data's first byte
        @thread_info = {}
        @native_tids = {}
        @warnings = []
        @dropped = 0
        @flags = 0
        @site_ids = {}
        @raw_samples = []
        @stacks = {}
        @stack_counts = nil
        @machine = nil
        @cpu_ticks = +"".b
        @cpu_samples = +"".b
      end

      # True when the trace recorded code locations (release sites and holder samples).
      def stacks? = @flags.anybits?(FLAG_STACKS)

      # True when ARG records carry values, so they are not events: with stacks, or from version 4
      # (turn records need them in any trace).
      def args? = stacks? || @version.to_i >= 4

      def stack(id) = @stacks[id]

      # The ids of the stacks the trace holds.
      def stack_ids = @stacks.keys

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

      # A .gvl file an importer wrote (GVLTracing.index), indexed as .index does, but named by the
      # imported trace's +path+, with the importer's +thread_info+, and no date nor native thread
      # ids (the other tools do not record them). #release_data removes the .gvl file.
      def self.index_converted(data_path, path:, thread_info:)
        index(data_path).tap do |file|
          file.instance_eval do
            @data_path = data_path
            @data_bytes = File.size(data_path)
            @path = path
            @thread_info = thread_info
            @native_tids = {}
            @start_realtime_ns = nil
          end
        end
      end

      # The .gvl file the engine reads: the trace's, or an importer's temporary one.
      def data_path = @data_path || @path
      def data_bytes = @data_bytes ||= File.size(data_path)

      # Removes an importer's temporary .gvl (once the engine holds it open); never a trace's own file.
      def release_data
        return unless @data_path

        File.unlink(@data_path) if File.exist?(@data_path)
        @data_path = nil
      end

      def truncated?
        @end_ns.nil?
      end

      def size
        @events || @times.size
      end

      # Records read: the events and, with stacks, the site and sample records (what the
      # recorder's counts and the end record count).
      def records
        size + (@stack_records || 0)
      end

      def duration_ns
        @end_ns || (@chunk_index ? @last_time : @times.last) || 0
      end

      # After the engine's first pass over an indexed file: what it counted. +serials+: the
      # threads seen in events, in order of their first event (they get a ThreadInfo, as the tests' #read
      # gives them); +bad_kind+: the first unknown event kind in time order (nil: none), at +bad_byte+.
      def indexed(events:, stack_records:, last_time:, serials:, bad_kind:, bad_byte:)
        corrupt!(bad_byte, "unknown event kind #{bad_kind}") if bad_kind
        @events = events
        @stack_records = stack_records if args?
        @last_time = last_time
        serials.each { |serial| @thread_info[serial] ||= ThreadInfo.new(serial: serial, name: nil, ractor_id: 0) }
        self
      end

      def index
        File.open(@path, "rb") do |io|
          size = io.size
          read_header(io.pread([size, HEADER_BYTES + 8].min, 0), size)
          @chunk_index = +"".b
          offset = @header_bytes
          while offset < size
            if offset + 8 > size
              warn_truncated(offset)
              break
            end
            type, payload_bytes = io.pread(8, offset).unpack("L<L<")
            payload_start = offset + 8
            if payload_start + payload_bytes > size
              warn_truncated(offset)
              break
            end
            # Only this chunk is in memory, at its place in the file: the checks name file offsets.
            @base = offset
            if type == CHUNK_EVENTS
              @data = io.pread(8 + [payload_bytes, EVENTS_HEADER_BYTES].min, offset)
              index_events(offset, payload_bytes)
            else
              @data = io.pread(8 + payload_bytes, offset)
              read_chunk(type, @data, offset, payload_bytes)
            end
            offset = payload_start + payload_bytes
          end
          @data = nil
          @base = 0
        end
        @dropped = @end_dropped if @end_dropped
        Model.mark_namesakes(@thread_info.values)
        self
      end

      private

      # A chunk other than events (#index keeps those in the file; the tests' #read reads them).
      def read_chunk(type, data, offset, payload_bytes)
        case type
        when CHUNK_THREADS then read_threads(data, offset, payload_bytes)
        when CHUNK_END then read_end(data, offset, payload_bytes)
        when CHUNK_STACKS then read_stacks(data, offset, payload_bytes)
        when CHUNK_CPU then read_cpu(data, offset, payload_bytes)
        else raise FormatError, "#{@path}: unknown chunk type #{type} at byte #{offset} (corrupt file?)"
        end
      end

      # +data+: the file's first bytes (the whole file for the tests' #read), +size+: the file's size.
      def read_header(data, size)
        raise FormatError, "#{@path}: empty file, not a gvlscope trace" if size.zero?
        unless data.start_with?(MAGIC)
          raise FormatError, "#{@path}: not a gvlscope trace (no #{MAGIC} magic at the start)"
        end
        raise FormatError, "#{@path}: truncated in its header (#{size} bytes)" if size < HEADER_BYTES

        _magic, version, @header_bytes, _mono, @start_realtime_ns, @pid, timeslice_us = data.unpack(HEADER)
        if version > VERSION
          raise FormatError, "#{@path}: format version #{version} is newer than this gvlscope reads (#{VERSION}); " \
                             "upgrade gvlscope"
        end
        raise FormatError, "#{@path}: bad header size #{@header_bytes}" if @header_bytes < HEADER_BYTES || @header_bytes > size

        @timeslice_ns = timeslice_us * 1000
        @flags = data.unpack1("L<", offset: HEADER_BYTES) if version >= 2 && @header_bytes >= HEADER_BYTES + 4
        @version = version
      end

      def warn_truncated(offset)
        @warnings << "#{@path}: file ends inside a chunk at byte #{offset} (process killed?); read what came before"
      end

      # The tests' #read_events for #index: the same checks; the chunk joins the index, its records stay in
      # the file.
      def index_events(offset, bytes)
        start = offset + 8
        corrupt!(offset, "event chunk of #{bytes} bytes, shorter than its header") if bytes < EVENTS_HEADER_BYTES
        native, tid, base, count, dropped_before = @data.unpack("L<L<Q<L<L<", offset: start - @base)
        if EVENTS_HEADER_BYTES + count * 8 != bytes
          corrupt!(offset, "event chunk of #{bytes} bytes claims #{count} records")
        end
        corrupt!(offset, "event chunk starts at #{base} ns (over 146 years)") if base >= MAX_TIME_NS

        @native_tids[native] = tid
        @dropped += dropped_before
        @chunk_index << [start + EVENTS_HEADER_BYTES, base, count | native << 32].pack("Q<Q<Q<")
      end

      # The code locations the trace interned (format.h, gvls_stacks_header). Every count is
      # checked against the chunk's size before anything is allocated for it.
      def read_stacks(data, chunk_offset, bytes)
        start = chunk_offset + 8
        finish = start + bytes
        corrupt!(chunk_offset, "stacks chunk of #{bytes} bytes, shorter than its header") if bytes < STACKS_HEADER_BYTES
        locations, stacks, sites, samples, dropped, unreadable = data.unpack("L<L<Q<Q<Q<Q<", offset: start - @base)
        # A location takes 12 bytes or more, a stack 4 or more.
        if STACKS_HEADER_BYTES + 12 * locations + 4 * stacks > bytes
          corrupt!(chunk_offset, "stacks chunk of #{bytes} bytes claims #{locations} locations and #{stacks} stacks")
        end
        @stack_counts = { sites: sites, samples: samples, dropped: dropped, unreadable: unreadable }
        offset = start + STACKS_HEADER_BYTES
        frames = [nil]
        locations.times do
          corrupt!(offset, "code location cut short by the end of its chunk") if offset + 12 > finish
          line, label_bytes, path_bytes = data.unpack("L<L<L<", offset: offset - @base)
          offset += 12
          corrupt!(offset, "code location's text runs past the end of its chunk") if offset + label_bytes + path_bytes > finish
          label = utf8(data.byteslice(offset - @base, label_bytes))
          path = utf8(data.byteslice(offset + label_bytes - @base, path_bytes))
          offset += label_bytes + path_bytes
          frames << Frame.new(label.empty? ? "(unknown)" : label, path.empty? ? nil : path, line).freeze
        end
        (1..stacks).each do |id|
          corrupt!(offset, "stack cut short by the end of its chunk") if offset + 4 > finish
          depth = data.unpack1("L<", offset: offset - @base)
          corrupt!(offset, "stack of #{depth} frames runs past the end of its chunk") if offset + 4 + 4 * depth > finish
          ids = data.unpack("L<#{depth}", offset: offset + 4 - @base)
          @stacks[id] = ids.map do |location|
            frames[location] || corrupt!(offset, "stack #{id} refers to location #{location} of #{locations}")
          end.freeze
          offset += 4 + 4 * depth
        end
        corrupt!(chunk_offset, "stacks chunk of #{bytes} bytes holds #{offset - start} bytes of tables") if offset != finish
      end

      # A CPU chunk (format.h, gvls_cpu_header): when the drain thread sampled, and the native
      # threads whose CPU time changed since their previous record, with that CPU time.
      def read_cpu(data, offset, bytes)
        corrupt!(offset, "CPU chunk of #{bytes} bytes, shorter than its header") if bytes < CPU_HEADER_BYTES
        at_ns, count = data.unpack("Q<L<", offset: offset + 8 - @base)
        if CPU_HEADER_BYTES + count * CPU_RECORD_BYTES != bytes
          corrupt!(offset, "CPU chunk of #{bytes} bytes claims #{count} samples")
        end
        corrupt!(offset, "CPU chunk at #{at_ns} ns (over 146 years)") if at_ns >= MAX_TIME_NS
        samples = data.unpack("L<L<Q<" * count, offset: offset + 8 + CPU_HEADER_BYTES - @base).each_slice(3).map do |native, _, cpu_ns|
          corrupt!(offset, "CPU time of #{cpu_ns} ns (over 146 years)") if cpu_ns >= MAX_TIME_NS
          [native, at_ns, cpu_ns]
        end
        @cpu_ticks << [at_ns].pack("q<")
        @cpu_samples << samples.flatten.pack("Q<*")
      end

      def read_threads(data, chunk_offset, bytes)
        offset = chunk_offset + 8
        finish = offset + bytes
        fixed = @version >= 2 ? THREAD_RECORD_BYTES + 4 : THREAD_RECORD_BYTES # version 2 adds created_at_bytes
        while offset < finish
          corrupt!(offset, "thread record cut short by the end of its chunk") if offset + fixed > finish
          serial, ractor_id, flags, name_bytes, site_bytes = data.unpack("L<L<L<L<L<", offset: offset - @base)
          site_bytes = 0 if fixed == THREAD_RECORD_BYTES
          if offset + fixed + name_bytes + site_bytes > finish
            corrupt!(offset, "thread name of #{name_bytes + site_bytes} bytes runs past the end of its chunk")
          end
          name = utf8(data.byteslice(offset + fixed - @base, name_bytes))
          site = utf8(data.byteslice(offset + fixed + name_bytes - @base, site_bytes))
          @thread_info[serial] = ThreadInfo.new(serial: serial, name: name.empty? ? nil : name, ractor_id: ractor_id,
                                                main: flags.anybits?(1), exited: flags.anybits?(2),
                                                created_at: site.empty? ? nil : Vocabulary.short_site(site))
          offset += fixed + name_bytes + site_bytes
        end
      end

      def read_end(data, offset, bytes)
        corrupt!(offset, "end record of #{bytes} bytes, not #{END_BYTES}") if bytes < END_BYTES
        @end_ns, _events, @end_dropped = data.unpack("Q<Q<Q<", offset: offset + 8 - @base)
        corrupt!(offset, "the trace ends at #{@end_ns} ns (over 146 years)") if @end_ns >= MAX_TIME_NS
        return if bytes < END_BYTES + MACHINE_BYTES

        cpus, load_milli = data.unpack("L<L<", offset: offset + 8 + END_BYTES - @base)
        @machine = Machine.new(cpus, load_milli / 1000.0) if cpus.positive? # load 0: unknown, or an idle machine
      end

      # One line naming the file and where in it: a corrupt trace, not gvlscope's failure.
      # Ruby takes any bytes as a thread name or a path; every output (JSON, HTML, protobuf) needs UTF-8,
      # and a terminal must not obey the control characters in them.
      def utf8(bytes) = Printable.text(bytes.force_encoding(Encoding::UTF_8))

      def corrupt!(offset, problem)
        raise FormatError, "#{@path}: #{problem} at byte #{offset} (corrupt file?)"
      end

    end
  end
end
