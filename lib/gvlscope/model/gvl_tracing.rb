# frozen_string_literal: true

require "json"
require "tempfile"
require_relative "../support/errors"
require_relative "trace_file"
require_relative "../support/printable"
require_relative "gvl_writer"

module GVLScope
  module Model
    # Reads a trace written by the gvl-tracing gem (Chrome trace events: per thread, "B" events
    # named by the state the thread enters) into a TraceFile, so gvlscope's summary, report and
    # exports work on traces people already have. States become the GVL events that lead to them.
    # gvl-tracing does not record native threads nor the timeslice: each Ruby thread counts as its
    # own native thread, and the timeslice is taken as CRuby's default, 100 ms.
    module GVLTracing
      STATE_EVENTS = { "started" => :started, "wants_gvl" => :ready, "running" => :resumed, "waiting" => :suspended,
                       "gc" => :gc_enter, "died" => :exited }.freeze
      MARKERS = %w[started_tracing stopped_tracing].freeze
      DEFAULT_TIMESLICE_NS = 100_000_000
      # gvl-tracing draws its "OS threads view" as a fake process with this pid.
      OS_THREADS_VIEW_PID = 0

      module_function

      # True if +path+ looks like JSON rather than a binary trace (its first non-blank byte).
      def json?(path)
        head = File.open(path, "rb") { |io| io.read(64) }.to_s
        head.lstrip.start_with?("[", "{")
      end

      # Reads the whole trace into memory (for .whole, and the tests' Model.read: their reference;
      # the report engine streams it instead: .index).
      def read(path)
        events = parse(path)
        pid = ruby_threads_pid(events) || raise(FormatError, "#{path}: JSON, but not a gvl-tracing trace " \
                                                             "(no thread state events such as running or wants_gvl)")
        build(path, pid, events)
      end

      # A file laid out otherwise than gvl-tracing writes it (.index) is read whole, up to this size:
      # its events as Hashes take some 10 times the file's size.
      WHOLE_FILE_BYTES = 128 << 20

      # The trace as Scan reads it: a TraceFile.index of a temporary .gvl file holding the same
      # events, threads and names as .read gives, written in one pass over the JSON (two when the
      # process is not the first one seen). Memory grows with threads, not events. The temporary
      # file is in Dir.tmpdir; TraceFile#release_data removes it (Scan does once the engine holds it
      # open). JSON not laid out one event per line in time order is read whole (.read), up to
      # +whole_file_bytes+.
      def index(path, whole_file_bytes: WHOLE_FILE_BYTES)
        converted = Stream.new(path).convert
        return whole(path, whole_file_bytes) unless converted

        gvl_path, _pid, thread_info = converted
        begin
          TraceFile.index_converted(gvl_path, path: path, thread_info: thread_info)
        rescue StandardError
          File.unlink(gvl_path)
          raise
        end
      end

      def whole(path, limit)
        size = File.size(path)
        if size > limit
          raise FormatError, "#{path}: a #{size >> 20} MB JSON file not laid out as gvl-tracing writes it (one event " \
                             "a line, in time order): gvlscope reads such a file whole, up to #{limit >> 20} MB"
        end
        read(path)
      end

      # The trace's events (Hashes), each with its JSON path ("traceEvents[12]") under PATH_KEY.
      def parse(path)
        data = JSON.parse(File.read(path))
        prefix = ""
        if data.is_a?(Hash)
          data = data["traceEvents"]
          prefix = "traceEvents"
        end
        raise FormatError, "#{path}: JSON, but not a gvl-tracing trace (no list of trace events)" unless data.is_a?(Array)

        data.each_with_index.filter_map { |event, index| event.merge(PATH_KEY => "#{prefix}[#{index}]") if event.is_a?(Hash) }
      rescue JSON::ParserError => e
        # The parser quotes the input, which may not be UTF-8: scrubbed, so the message can be printed.
        raise FormatError, "#{path}: not valid JSON (#{e.message.scrub.lines.first.to_s.strip[0, 80]}); truncated?"
      end

      PATH_KEY = :json_path # a Symbol: no key of parsed JSON
      # Timestamps are microseconds; past 2^51 (71 years) one is corrupt, and its nanoseconds would
      # overflow the 64 log2 buckets of the histograms.
      MAX_TS = 2**51
      MAX_ID = 2**31 - 1

      # The pid of the "Ruby threads view": the one whose B events carry gvl-tracing state names.
      def ruby_threads_pid(events)
        pids = events.filter_map { |event| event["pid"] if event["ph"] == "B" && STATE_EVENTS.key?(event["name"]) }
        (pids - [OS_THREADS_VIEW_PID]).tally.max_by { |_, count| count }&.first || pids.first
      end

      def build(path, pid, events)
        begins = events.select { |e| e["ph"] == "B" && e["pid"] == pid && (STATE_EVENTS.key?(e["name"]) || MARKERS.include?(e["name"])) }
        begins.each { |event| check(path, event, pid) }
        begins.sort_by!.with_index { |event, index| [event["ts"], index] }
        origin = begins.first["ts"]
        times = []
        kinds = []
        threads = []
        state_of = {}
        end_ns = nil
        begins.each do |event|
          name = event["name"]
          time = ((event["ts"] - origin) * 1000).round
          next end_ns = time if name == "stopped_tracing"
          next if MARKERS.include?(name)

          kind = STATE_EVENTS[name]
          serial = event["tid"] + 1 # serial 0 means "no thread" in gvlscope's format
          # Leaving gc for running is the end of a GC inside a hold, not a new acquisition.
          kind = :gc_exit if kind == :resumed && state_of[serial] == "gc"
          state_of[serial] = name
          times << time
          kinds << kind
          threads << serial
        end
        TraceFile.from_events(path: path, pid: pid, timeslice_ns: DEFAULT_TIMESLICE_NS, times: times, kinds: kinds,
                              threads: threads, thread_info: thread_info(events, pid, threads), end_ns: end_ns || times.last || 0)
      end

      # The fields every state event needs, of the right type and size: a clear error (with the
      # event's JSON path) rather than a failure later in the timeline, the report or an export.
      def check(path, event, pid)
        unless pid.is_a?(Integer) && pid.between?(0, MAX_ID)
          raise FormatError, "#{path}: #{event[PATH_KEY]}.pid: #{pid.inspect[0, 40]} is not a process id"
        end
        tid = event["tid"]
        unless tid.is_a?(Integer) && tid.between?(0, MAX_ID)
          raise FormatError, "#{path}: #{event[PATH_KEY]}.tid: #{tid.inspect[0, 40]} is not a thread id (an Integer >= 0)"
        end
        ts = event["ts"]
        return if ts.is_a?(Numeric) && ts.finite? && ts.abs < MAX_TS

        raise FormatError, "#{path}: #{event[PATH_KEY]}.ts: #{ts.inspect[0, 40]} is not a time in microseconds"
      end

      def thread_info(events, pid, threads)
        names = events.each_with_object({}) do |event, found|
          next unless event["pid"] == pid

          name = thread_name(event)
          found[event["tid"] + 1] = name if name
        end
        thread_table(names, threads.uniq)
      end

      # The name a "thread_name" metadata event gives (UTF-8 and printable, as in .gvl traces).
      def thread_name(event)
        return unless event["ph"] == "M" && event["name"] == "thread_name" && event["tid"].is_a?(Integer)

        name = event["args"]["name"] if event["args"].is_a?(Hash)
        Printable.text(name) if name.is_a?(String)
      end

      # serial => ThreadInfo of the threads with these serials (in order), by +names+ (serial => name).
      def thread_table(names, serials)
        table = serials.to_h do |serial|
          name = names[serial]
          main = name == "Main Thread"
          name = "thread #{serial - 1}" if name.nil? || name.empty? # gvl-tracing's own thread number
          [serial, ThreadInfo.new(serial: serial, name: main ? nil : name, ractor_id: 0, main: main)]
        end
        Model.mark_namesakes(table.values)
        table
      end

      # One pass over gvl-tracing JSON as its writer lays it out: "[", then one event object a line
      # (a comma after each but the last), then "]". Each line is parsed alone (a regular expression
      # for its B and E events, JSON.parse for the others) and each state event goes to a
      # GvlWriter once it is the earliest of the last REORDER_WINDOW. Anything else (another
      # layout, a line that does not parse, an event further out of time order, or one that .check
      # would refuse) gives up: .read then reads the file whole and says what is wrong as it did.
      class Stream
        NUMBER = "-?(?:0|[1-9][0-9]*)(?:\\.[0-9]+)?(?:[eE][-+]?[0-9]+)?"
        SPACE = "[ \\t\\r\\n]*"
        # gvl-tracing's own lines, exactly (JSON's whitespace, numbers without leading zeros).
        BEGIN_LINE = /\A#{SPACE}\{"ph": "B", "pid": (0|[1-9][0-9]*), "tid": (0|[1-9][0-9]*), "ts": (#{NUMBER}), "name": "([a-z_]+)"\}(,?)#{SPACE}\z/
        END_LINE = /\A#{SPACE}\{"ph": "E", "pid": (?:0|[1-9][0-9]*), "tid": (?:0|[1-9][0-9]*), "ts": #{NUMBER}\}#{SPACE}\z/
        END_LINE_MORE = /\A#{SPACE}\{"ph": "E", "pid": (?:0|[1-9][0-9]*), "tid": (?:0|[1-9][0-9]*), "ts": #{NUMBER}\},#{SPACE}\z/
        BLANK = /\A#{SPACE}\z/
        OPEN = /\A#{SPACE}\[#{SPACE}\z/
        CLOSE = /\A#{SPACE}\]#{SPACE}\z/
        SELECTED = (STATE_EVENTS.keys + MARKERS).to_h { |name| [name, true] }.freeze
        GiveUp = Class.new(StandardError)
        LONGEST_LINE = 1 << 20
        # gvl-tracing takes an event's time, then writes it (no lock between): threads' events can
        # come a little out of time order. Events are put back in order within this many.
        REORDER_WINDOW = 4096

        def initialize(path)
          @path = path
        end

        # [the .gvl file's path, the pid, thread_info] (the file is the caller's to remove), or nil
        # when the file is not laid out so.
        def convert
          tally = {}
          converted = pass(nil, tally)
          pid = (tally.keys - [OS_THREADS_VIEW_PID]).max_by { |key| tally[key] } || tally.keys.first
          raise FormatError, "#{@path}: JSON, but not a gvl-tracing trace (no thread state events such as running or wants_gvl)" if pid.nil?
          return converted if converted && converted[1].eql?(pid)

          File.unlink(converted[0]) if converted
          pass(pid, nil) || raise(GiveUp)
        rescue GiveUp
          nil
        end

        private

        # Converts the events of process +pid+ (nil: the first one other than the OS threads view
        # that has a state event or marker); counts every process's state events in +tally+.
        def pass(pid, tally)
          io = Tempfile.create(["gvlscope-import-", ".gvl"], Dir.tmpdir, binmode: true) # O_EXCL: never an existing file
          begin
            @io = io
            @writer = nil
            @pid = pid
            @names = []
            @state_of = {}
            @serials = {}
            @end_ns = nil
            @last_ts = nil
            @last_time = nil
            @pending = []
            @emitted_ts = nil
            each_event(tally) { |pid_of, tid, ts, name| add(pid_of, tid, ts, name) }
            @pending.each { |event| emit(*event) }
            raise GiveUp unless @writer || tally # the process has no event: .read says what is wrong
            unless @writer # only the OS threads view has events: again, with its pid
              io.close
              File.unlink(io.path)
              return nil
            end

            finish
            [io.path, @pid, @thread_info]
          rescue StandardError
            io.close unless io.closed?
            File.unlink(io.path)
            raise
          ensure
            io.close unless io.closed?
          end
        end

        # An event of the chosen process, in file order: checked, then held among the last
        # REORDER_WINDOW ones until its turn in time order comes.
        def add(pid, tid, ts, name)
          @pid ||= pid unless pid.eql?(OS_THREADS_VIEW_PID)
          return unless pid == @pid

          # What .check refuses, and what a .gvl cannot hold (a serial has 24 bits), .read handles.
          raise GiveUp unless @pid.is_a?(Integer) && @pid.between?(0, MAX_ID)
          raise GiveUp unless tid.is_a?(Integer) && tid >= 0 && tid < Record::MAX_VALUE
          raise GiveUp unless ts.is_a?(Numeric) && ts.finite? && ts.abs < MAX_TS
          raise GiveUp if @emitted_ts && ts < @emitted_ts # later than the window allows

          event = [ts, tid, name]
          if @pending.empty? || ts >= @pending.last[0]
            @pending << event
          else # after those of the same time: ties keep file order
            @pending.insert(@pending.bsearch_index { |other| other[0] > ts }, event)
          end
          emit(*@pending.shift) if @pending.size > REORDER_WINDOW
        end

        # The next event in time order (ties in file order), as .build turns it into a GVL event.
        def emit(ts, tid, name)
          @emitted_ts = ts
          unless @writer
            @writer = GvlWriter.new(@io, pid: @pid, timeslice_ns: DEFAULT_TIMESLICE_NS)
            @origin = ts
          end
          time = ((ts - @origin) * 1000).round
          raise GiveUp if time >= GvlWriter::MAX_TIME_NS
          return @end_ns = time if name == "stopped_tracing"
          return unless (kind = STATE_EVENTS[name])

          serial = tid + 1 # serial 0 means "no thread" in gvlscope's format
          # Leaving gc for running is the end of a GC inside a hold, not a new acquisition.
          kind = :gc_exit if kind == :resumed && @state_of[serial] == "gc"
          @state_of[serial] = name
          @serials[serial] = true
          @writer.add(time, kind, serial)
          @last_time = time
        end

        def finish
          names = {}
          @names.each { |pid, serial, name| names[serial] = name if pid == @pid }
          @thread_info = GVLTracing.thread_table(names, @serials.keys)
          @writer.finish(threads: @thread_info.values, end_ns: @end_ns || @last_time || 0)
        end

        # Yields [pid, tid, ts, name] of each B event with a state or marker name, in file order;
        # keeps the thread names; gives up on a line that is not one event as gvl-tracing writes it.
        def each_event(tally)
          state = :before # :before "[", :first (no event yet), :more (after a comma), :last (no comma), :after "]"
          # A line longer than gvl-tracing writes is cut, does not parse, and the file is read whole.
          File.foreach(@path, "\n", LONGEST_LINE) do |line|
            if state == :before || state == :after
              next if line.match?(BLANK)
              raise GiveUp unless state == :before && line.match?(OPEN)

              state = :first
            elsif line.match?(CLOSE)
              raise GiveUp if state == :more

              state = :after
            elsif state == :last
              raise GiveUp
            elsif line.match?(END_LINE_MORE)
              state = :more
            elsif line.match?(END_LINE)
              state = :last
            elsif (match = BEGIN_LINE.match(line))
              state = match[5].empty? ? :last : :more
              name = match[4]
              next unless SELECTED[name]

              pid = match[1].to_i
              ts = match[3]
              ts = ts.match?(/[.eE]/) ? Float(ts) : ts.to_i # as JSON.parse gives it
              count(tally, pid, name)
              yield pid, match[2].to_i, ts, name
            else
              state = other(line, tally) { |*event| yield(*event) }
            end
          end
          raise GiveUp unless state == :after
        rescue ArgumentError, EncodingError
          raise GiveUp # a line with bytes that are not UTF-8 (regular expressions refuse them)
        end

        # A line that is not a B or E event as gvl-tracing writes it: one JSON object, or give up.
        def other(line, tally)
          body = line.strip
          more = body.end_with?(",")
          event = JSON.parse(more ? body.chop : body)
          raise GiveUp unless event.is_a?(Hash)

          pid = event["pid"]
          if (name = GVLTracing.thread_name(event))
            @names << [pid, event["tid"] + 1, name]
          elsif event["ph"] == "B" && SELECTED[event["name"]]
            count(tally, pid, event["name"])
            yield pid, event["tid"], event["ts"], event["name"]
          end
          more ? :more : :last
        rescue JSON::ParserError
          raise GiveUp
        end

        def count(tally, pid, name)
          tally[pid] = tally.fetch(pid, 0) + 1 if tally && STATE_EVENTS.key?(name)
        end
      end
    end
  end
end
