# frozen_string_literal: true

require "json"
require_relative "../errors"
require_relative "trace_file"

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

      def read(path)
        events = parse(path)
        pid = ruby_threads_pid(events) || raise(FormatError, "#{path}: JSON, but not a gvl-tracing trace " \
                                                             "(no thread state events such as running or wants_gvl)")
        build(path, pid, events)
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
          next unless event["ph"] == "M" && event["name"] == "thread_name" && event["pid"] == pid && event["tid"].is_a?(Integer)

          name = event["args"]["name"] if event["args"].is_a?(Hash)
          found[event["tid"] + 1] = name.scrub if name.is_a?(String) # UTF-8 for every output, as in .gvl traces
        end
        threads.uniq.to_h do |serial|
          name = names[serial]
          main = name == "Main Thread"
          name = "thread #{serial - 1}" if name.nil? || name.empty? # gvl-tracing's own thread number
          [serial, ThreadInfo.new(serial: serial, name: main ? nil : name, ractor_id: 0, main: main)]
        end
      end
    end
  end
end
