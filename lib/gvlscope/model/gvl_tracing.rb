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

      def parse(path)
        data = JSON.parse(File.read(path))
        data = data["traceEvents"] if data.is_a?(Hash)
        raise FormatError, "#{path}: JSON, but not a gvl-tracing trace (no list of trace events)" unless data.is_a?(Array)

        data.grep(Hash)
      rescue JSON::ParserError => e
        raise FormatError, "#{path}: not valid JSON (#{e.message.lines.first.strip[0, 80]}); truncated?"
      end

      # The pid of the "Ruby threads view": the one whose B events carry gvl-tracing state names.
      def ruby_threads_pid(events)
        pids = events.filter_map { |event| event["pid"] if event["ph"] == "B" && STATE_EVENTS.key?(event["name"]) }
        (pids - [OS_THREADS_VIEW_PID]).tally.max_by { |_, count| count }&.first || pids.first
      end

      def build(path, pid, events)
        begins = events.select { |e| e["ph"] == "B" && e["pid"] == pid && e["ts"].is_a?(Numeric) && e["tid"].is_a?(Integer) }
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

          kind = STATE_EVENTS[name] or next
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

      def thread_info(events, pid, threads)
        names = events.each_with_object({}) do |event, found|
          next unless event["ph"] == "M" && event["name"] == "thread_name" && event["pid"] == pid

          name = event["args"]["name"] if event["args"].is_a?(Hash)
          found[event["tid"].to_i + 1] = name.scrub if name.is_a?(String) # UTF-8 for every output, as in .gvl traces
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
