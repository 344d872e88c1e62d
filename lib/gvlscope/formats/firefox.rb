# frozen_string_literal: true

require "json"
require_relative "format"
require_relative "../support/vocabulary"
require_relative "../version"
require_relative "../model/scan"

module GVLScope
  module Formats
    # A trace -> the Firefox Profiler's processed profile (JSON; profiler.firefox.com, "Load a
    # profile from file"). Written as processed format version 48 (meta.version 28), which the
    # profiler upgrades on load, as it does vernier's profiles:
    #
    # - a thread (a track) per Ruby thread, its GVL states as interval markers named by the state
    #   ("run", "wait", "idle (io)", "gc", "started"; "exited" an instant), each with data
    #   {type: "GVL", state, reason (of an idle interval), released_by (the cause that ended a run)}
    #   and a category per state, so the marker chart draws each thread as a row of states;
    # - a thread whose event loop gave its fibers turns (traces with turns, docs/fibers.md): an
    #   interval marker "fiber N" per turn (Model::Turn), data {type: "Fiber", fiber, code (where a
    #   long turn's fiber gave the loop back)}, after its states;
    # - with stacks, the holder samples as the holder thread's samples (stack, frame and func
    #   tables), each weighted by the threads that waited then: the call tree of a thread is the
    #   code it ran while it made others wait.
    #
    # Times are ms since the trace started (meta.startTime is its wall-clock start). The marker
    # columns come from the engine (Model::Scan#firefox_column, ext/gvlscope_engine/output.c),
    # streamed to the io a column at a time: memory stays bounded whatever the number of
    # intervals.
    class Firefox < Format
      VERSION_FIELDS = { version: 28, preprocessedProfileVersion: 48 }.freeze
      # The categories (meta.categories): the first, grey, is the default the profiler wants.
      CATEGORIES = [["Other", "grey"], ["GVL run", "green"], ["GVL wait", "red"], ["Idle", "transparent"],
                    ["GC", "orange"], ["Ruby", "purple"]].freeze
      CATEGORY = { run: 1, wait: 2, idle: 3, gc: 4 }.freeze
      RUBY = 5
      MARKER = "GVL"
      FIBER_MARKER = "Fiber"
      # The holders are sampled at the timer thread's 10 ms tick.
      INTERVAL_MS = 10

      def write(io)
        @io = io
        threads = scan.threads.values.select { |thread| scan.drawn?(thread.serial) || samples_of(thread.serial).any? }
        @out = +"{\"meta\":#{JSON.generate(meta(threads))},\"libs\":[],\"threads\":["
        threads.each_with_index do |thread, index|
          @out << "," unless index.zero?
          write_thread(thread)
        end
        @out << "]}\n"
        io << @out
        io
      end

      private

      # The engine's answers (a Model::Scan): the markers are streamed from its copy of the intervals.
      def scan = @subject

      def meta(threads)
        main = threads.index { |thread| thread.info.main } || 0
        {
          interval: INTERVAL_MS, startTime: (scan.file.start_realtime_ns || 0) / 1_000_000.0, processType: 0,
          product: "gvlscope #{GVLScope::VERSION}: #{File.basename(scan.file.path.to_s)}", stackwalk: 0, **VERSION_FIELDS,
          symbolicated: true, categories: CATEGORIES.map { |name, color| { name: name, color: color, subcategories: ["Other"] } },
          markerSchema: [marker_schema, *([fiber_marker_schema] if turns_of.any?)], initialVisibleThreads: threads.each_index.to_a,
          initialSelectedThreads: threads.empty? ? [] : [main]
        }
      end

      def marker_schema
        {
          name: MARKER, display: %w[marker-chart marker-table timeline-overview],
          tooltipLabel: "{marker.name} {marker.data.reason}{marker.data.released_by}",
          tableLabel: "{marker.data.state} {marker.data.reason}{marker.data.released_by}",
          chartLabel: "{marker.name}",
          data: [{ key: "state", label: "State", format: "string", searchable: true },
                 { key: "reason", label: "Idle because of", format: "string", searchable: true },
                 { key: "released_by", label: "Released the GVL for", format: "string", searchable: true },
                 { label: "Description", value: "the thread's GVL state (gvlscope: docs/format.md)" }]
        }
      end

      # Only in a trace with turns: the others' profiles stay as they were.
      def fiber_marker_schema
        {
          name: FIBER_MARKER, display: %w[marker-chart marker-table timeline-overview],
          tooltipLabel: "{marker.name} {marker.data.code}", tableLabel: "{marker.name} {marker.data.code}",
          chartLabel: "{marker.name}",
          data: [{ key: "fiber", label: "Fiber", format: "integer", searchable: true },
                 { key: "code", label: "Gave the loop back in", format: "string", searchable: true },
                 { label: "Description", value: "a turn of the thread's event loop: the fiber it ran (gvlscope: docs/fibers.md)" }]
        }
      end

      # The event loops' turns, by thread serial (the Perfetto export's, Model::Turns).
      def turns_of(serial = nil)
        @turns_of ||= (scan.respond_to?(:turns) ? scan.turns : []).group_by(&:thread)
        serial ? @turns_of.fetch(serial, []) : @turns_of
      end

      # The thread's turns as marker columns (JSON texts by column key), after its states'.
      def turn_columns(serial, intern)
        turns = turns_of(serial)
        {
          "startTime" => turns.map { |turn| ms(turn.start_ns) }, "endTime" => turns.map { |turn| ms(turn.end_ns) },
          "name" => turns.map { |turn| intern.call("fiber #{turn.fiber}") },
          "data" => turns.map do |turn|
            JSON.generate({ type: FIBER_MARKER, fiber: turn.fiber, code: turn.given_back_label }.compact)
          end,
          "category" => turns.map { RUBY }, "phase" => turns.map { 1 }
        }
      end

      # The thread's name, and its Ractor when the trace has several (as in the speedscope export).
      def name_of(thread)
        @several_ractors = scan.ractors.size > 1 if @several_ractors.nil?
        @several_ractors ? "#{thread.display_name} (Ractor #{thread.ractor_id})" : thread.display_name
      end

      def samples_of(serial) = (@samples ||= scan.samples.group_by(&:thread))[serial] || []

      def write_thread(thread)
        strings = {}
        intern = ->(text) { strings[text] ||= strings.size }
        tables = sample_tables(samples_of(thread.serial), intern)
        # Every name a marker may have, interned first; a column of texts by the engine's keys.
        names, data, categories, phases = marker_texts(intern)
        turns = turn_columns(thread.serial, intern)
        pid = scan.file.pid.to_s
        head = {
          name: name_of(thread), isMainThread: thread.info.main ? true : false, processType: "default",
          processName: "pid #{pid}", processStartupTime: 0, processShutdownTime: ms(scan.duration_ns), registerTime: 0,
          unregisterTime: nil, pausedRanges: [], pid: pid, tid: thread.serial, **tables
        }
        @out << JSON.generate(head).delete_suffix("}") << ',"markers":{'
        { "startTime" => [0, nil], "endTime" => [1, nil], "name" => [2, names], "data" => [2, data],
          "category" => [2, categories], "phase" => [2, phases] }.each_with_index do |(key, (column, texts)), index|
          @out << "," unless index.zero?
          @out << %("#{key}":[)
          @io << @out
          @out.clear
          @length = engine_write(@io, :firefox_column, thread.serial, column, texts || [], scan: scan)
          @out << "," if @length.positive? && turns[key].any?
          @out << turns[key].join(",") << "]"
        end
        @out << %(,"length":#{@length + turns["name"].size}},"stringArray":#{JSON.generate(strings.keys)}})
      end

      # [names, data, categories, phases]: each an Array of JSON texts by the engine's key (a name
      # code; a run interval with a release cause: FIREFOX_KEYS - REASONS.size + the cause).
      def marker_texts(intern)
        keys = Engine::FIREFOX_KEYS
        reasons = Model::Scan::REASONS
        names = Array.new(keys)
        data = Array.new(keys)
        categories = Array.new(keys)
        phases = Array.new(keys)
        key_of = {}
        Model::Scan::STATES.each_with_index { |state, code| key_of[code] = [state, nil, nil] if state && state != :idle }
        reasons.each_with_index { |reason, code| key_of[Model::Scan::STATES.size + code] = [:idle, reason, nil] }
        reasons.each_with_index { |reason, code| key_of[keys - reasons.size + code] = [:run, nil, reason] if reason }
        key_of.each do |key, (state, reason, released_by)|
          names[key] = intern.call(Vocabulary.slice_name(state, reason)).to_s
          datum = { type: MARKER, state: state }
          datum[:reason] = reason.to_s.tr("_", "/") if state == :idle
          datum[:released_by] = released_by if released_by
          data[key] = JSON.generate(datum)
          categories[key] = CATEGORY.fetch(state, 0).to_s
          phases[key] = state == :exited ? "0" : "1"
        end
        [names, data, categories, phases]
      end

      # The thread's samples with their stack, frame, func, resource and native symbol tables.
      def sample_tables(samples, intern)
        funcs = {}   # [label, path] => index
        frames = {}  # [func, line] => index
        stacks = {}  # [prefix, frame] => index
        stack_of = {}.compare_by_identity # a stack (interned Array of frames) => its stack index
        sample_stacks = samples.map do |sample|
          stack_of[sample.stack] ||= shown_stack(sample.stack).reverse_each.inject(nil) do |prefix, frame|
            func = funcs[[frame.label, frame.path]] ||= funcs.size
            index = frames[[func, frame.line]] ||= frames.size
            stacks[[prefix, index]] ||= stacks.size
          end
        end
        func_keys = funcs.keys
        frame_keys = frames.keys
        stack_keys = stacks.keys
        {
          frameTable: table(frame_keys.size, address: -1, inlineDepth: 0, category: RUBY, subcategory: 0,
                                             func: frame_keys.map(&:first), nativeSymbol: nil, innerWindowID: nil,
                                             implementation: nil, line: frame_keys.map { |_, line| line&.positive? ? line : nil },
                                             column: nil),
          funcTable: table(func_keys.size, name: func_keys.map { |label, _| intern.call(label) },
                                           isJS: func_keys.map { |_, path| !path.nil? }, relevantForJS: false, resource: -1,
                                           fileName: func_keys.map { |_, path| path && intern.call(path) },
                                           lineNumber: nil, columnNumber: nil),
          nativeSymbols: table(0, libIndex: nil, address: nil, name: nil, functionSize: nil),
          resourceTable: table(0, lib: nil, name: nil, host: nil, type: nil),
          stackTable: table(stack_keys.size, frame: stack_keys.map(&:last), category: RUBY, subcategory: 0,
                                             prefix: stack_keys.map(&:first)),
          samples: table(samples.size, stack: sample_stacks, time: samples.map { |sample| ms(sample.time_ns) },
                                       weight: samples.map(&:waiters)).merge(weightType: "samples")
        }
      end

      # A table of columns: each given Array, or a constant repeated +length+ times.
      def table(length, **columns)
        columns.transform_values { |column| column.is_a?(Array) ? column : Array.new(length, column) }.merge(length: length)
      end

      # ns as ms: exact decimals in JSON (a Rational's digits, at most 6 after the point).
      def ms(ns) = ns % 1_000_000 == 0 ? ns / 1_000_000 : (ns / 1_000_000r).to_f
    end
  end
end
