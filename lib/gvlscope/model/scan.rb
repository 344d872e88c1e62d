# frozen_string_literal: true

require "tmpdir"
require_relative "../support/errors"
require_relative "../support/vocabulary"
require_relative "trace_file"
require_relative "gvl_tracing"
require_relative "interval"
require_relative "engine_library"

module GVLScope
  module Model
    # A trace read by the native report engine (ext/gvlscope_engine, docs/architecture.md): the
    # one reader of traces. A first pass over the records (Engine::Index) learns what the second
    # needs before it starts; the second (Engine::Pass) runs the GVL state machine and sums what
    # the report reads as intervals close: per-thread rows, histograms, the blame, code locations,
    # the HTML overview, and for the exports a compact copy of each thread's intervals in a
    # temporary file. Memory grows with threads, stacks and samples, not with events.
    #
    # What a trace answers, to the analysis (Analysis::Report and its parts), the formats, `top`,
    # `lab` and `advise`: file, threads, ractors, duration_ns, stacks?, samples, waiters_at_acquire,
    # shared_native_threads?, thread_rows, all_waits_median_ns, histograms, blame_rows,
    # code_rows, release_site_rows, overview_lanes, details, and the exports' writers. A thread's
    # +intervals+ are not kept: asking for them runs one more pass that collects them all (for
    # small traces and tests). test/support/reference_timeline.rb is the same state machine in
    # plain Ruby, kept to check this one against.
    class Scan
      # The engine's numbering (ext/gvlscope_engine/numbering.h; test/engine/numbering_test.rb checks these
      # against Engine::STATES and Engine::REASONS, which the engine makes from the same lists).
      STATES = [nil, :started, :wait, :run, :gc, :idle, :exited, :gone].freeze
      REASONS = [nil, :io, :sleep, :lock, :join, :pass, :blocking, :preempted, :exit, :io_sleep, :unknown].freeze
      KIND_CODES = Vocabulary::EVENT_KINDS.each_with_index.to_h.freeze
      # Work between two calls back into Ruby (progress, interrupts).
      STEP_BYTES = 4 << 20
      ALL = (2**62).freeze

      # Loads the engine's extension (built with the gem; in a checkout, by `rake compile`) and
      # gives it the names; raises Error where it does not load.
      def self.load!
        return if @loaded

        Model.load_engine_library
        Engine.vocabulary(NAMES, REASONS.map(&:to_s))
        @loaded = true
      end

      # The name of an interval in the exports, by the engine's name code: a state, or
      # STATES.size + the reason of an idle interval (Vocabulary.slice_name).
      NAMES = (STATES.map { |state| state.to_s } +
               REASONS.map { |reason| Vocabulary.slice_name(:idle, reason) }).freeze

      # Reads the trace at +path+ (a .gvl trace, or gvl-tracing JSON) in the engine's two passes.
      # +bins+: the overview's bins (the HTML report's); +spill+: keep the intervals for an export.
      # +progress+: a GVLScope::Progress (or anything with #advance_to), told how far each pass got.
      def self.open(path, bins: nil, spill: false, progress: nil)
        new(read(path), bins: bins, spill: spill, progress: progress).run
      end

      # What the engine reads of the trace at +path+ before its passes: a TraceFile.index (of a
      # gvl-tracing trace, converted to a temporary .gvl file: GVLTracing.index; Scan.new removes it).
      def self.read(path) = GVLTracing.json?(path) ? GVLTracing.index(path) : TraceFile.index(path)

      attr_reader :file, :bins

      # The engine's passes over the trace's events so far (Engine::Pass: the main one, each
      # overview of other bins, each call of #details, the exports' copy), the index's not counted.
      attr_reader :passes

      # +file+: a TraceFile from TraceFile.index, or one holding its events in memory (a
      # gvl-tracing import, TraceFile.from_events; not a .gvl file read whole, which has stacks).
      # The first pass runs here (an unknown event kind raises here, as TraceFile#read would);
      # the second at #run or on the first question.
      #
      # Medians (ThreadStats::Row#median_wait_ns, Report#all_waits_median_ns) are exact while the
      # wait durations fit +exact_medians+ values in all (64 MB by default: some 30M events), then
      # come from a log-linear histogram, within 1 %.
      #
      # +analyse+: false for a pass that only feeds an export (no rows, blame, histograms nor code
      # locations: asking for them runs another pass).
      def initialize(file, bins: nil, spill: false, progress: nil, exact_medians: nil, analyse: true)
        @file = file
        @analyse = analyse
        @exact_medians = exact_medians
        @bins = bins
        @spilled = spill
        @progress = progress
        @overviews = {}
        @passes = 0
        begin
          Scan.load!
          @index = index_of(file)
        ensure
          file.release_data if file.respond_to?(:release_data) # the engine holds an import's .gvl open
        end
      end

      # Runs the main pass now (before an output file is opened: a read error leaves none).
      def run
        @analyse ? pass : spilled
        self
      end

      def duration_ns = @file.duration_ns
      def timeslice_ns = @file.timeslice_ns

      # True when the trace recorded code locations (false for old traces, --no-stacks and
      # gvl-tracing imports): outputs then say "stacks: not recorded".
      def stacks? = @file.respond_to?(:stacks?) && @file.stacks?

      # True when the trace sampled its native threads' CPU time (format version 3, a file sink's
      # trace): the engine then tells what of each hold the OS kept its thread off a CPU.
      def cpu_sampled? = @file.respond_to?(:cpu_ticks) && !@file.cpu_ticks.empty?

      # serial => ThreadTimeline, in order of appearance (first event or sample, then the thread
      # table); their intervals come from another pass, on first use.
      def threads
        @threads ||= begin
          threads = {}
          any_pass.threads.each { |row| threads[row.serial] = thread(row.serial) }
          @file.thread_info.each_key { |serial| threads[serial] ||= thread(serial) }
          threads
        end
      end

      def each_thread(&block) = threads.each_value(&block)
      def ractors = threads.values.group_by(&:ractor_id)
      def waiters_at_acquire = any_pass.waiters_at_acquire
      def shared_native_threads? = any_pass.shared_natives?

      # The engine's per-thread sums: serial => Engine::ThreadRow (ext/gvlscope_engine/engine.c
      # declares its fields), in order of appearance.
      def thread_rows = @thread_rows ||= pass.threads.to_h { |row| [row.serial, row] }

      def all_waits_median_ns = pass.all_waits_median

      # Engine::Histograms (hold_ns and wait_ns bucket counts) of the threads with these serials
      # (all when nil).
      def histograms(serials = nil) = pass.histograms(serials&.to_h { |serial| [serial, true] })

      # Engine::BlameRows.
      def blame_rows = pass.blame

      # Code locations: Engine::CodeRows of a kind (Engine::Pass#code) and Engine::ReleaseSiteRows.
      def code_rows(kind) = (@code_rows ||= {})[kind] ||= pass.code(kind)
      def release_site_rows = @release_site_rows ||= pass.release_sites

      # The event loops' turns (Model::Turns; none before format version 4, nor in imports).
      def turns
        @turns ||= begin
          found = @index.turns if @file.chunk_index # Engine::TurnColumns
          rows = found ? found.times.each_index.map { |at| [found.times[at], found.serials[at], TraceFile::KINDS[found.kinds[at]], found.values[at]] } : []
          Turns.build(rows, end_ns: duration_ns, stack: ->(id) { @file.stack(id) })
        end
      end

      # The holders' samples (Model::Sample), kept while threads waited: at most ~100 a second.
      def samples
        @samples ||= samples_of(any_pass.samples)
      end

      def sample_count = any_pass.sample_count

      # Holder samples no thread waited for (Model::Sample, waiters 0): a loop thread's task deep in
      # a long turn, sampled at the trace's CPU ticks (ext/gvlscope/fibers.c).
      def lone_samples
        @lone_samples ||= samples_of(any_pass.lone_samples)
      end

      # serial => Array of bins * 4 Integers (Analysis::Overview#lane) for +bins+ bins; another
      # pass when the first had other bins.
      def overview_lanes(bins)
        return pass.overview if bins == @bins

        @overviews[bins] ||= run_pass(bins: bins).overview
      end

      # The intervals (Model::Interval) of every thread that overlap each window [start_ns,
      # end_ns), at most +limit+ each (or the window's own: [start_ns, end_ns, limit]), in time
      # order (Analysis::Report#detail): one more pass, whatever the number of windows.
      def details(windows, limit:)
        found = window_rows(windows, limit)
        # In place, window by window: each one's rows are garbage once its intervals are made.
        found.each_index { |index| found[index] = found[index].map { |row| interval(row) } }
      end

      def detail(start_ns, end_ns, limit:) = details([[start_ns, end_ns]], limit: limit).first

      # #details as IntervalColumns, one per window: the same intervals in the same order, with no
      # object per interval (the HTML report's windows).
      def details_columns(windows, limit:)
        window_pass(windows, limit).window_columns.map do |found|
          IntervalColumns.new(found.serials, found.states.map! { |code| STATES[code] },
                              found.reasons.map! { |code| REASONS[code] }, found.starts, found.ends)
        end
      end

      # What the engine's two passes allocated at most, in bytes (tests: memory bounded by the
      # trace's threads, not its events).
      def peak_bytes = @index.memory.peak_bytes + any_pass.memory.peak_bytes

      # The exports' writers (formats/chrome_json.rb, perfetto.rb, speedscope.rb), each into
      # +target+: a file descriptor, written directly; or nil: pieces of up to ~1 MB are yielded,
      # in one String refilled each time (write or copy it in the block). They read the pass that
      # kept the intervals (made on first use).
      def chrome_slices(serial, pid, target, &block) = spilled.chrome_slices(serial, pid, target, &block)
      def chrome_native(serial, prefix, target, &block) = spilled.chrome_native(serial, prefix, target, &block)
      def chrome_counter(prefix, target, &block) = spilled.chrome_counter(prefix, target, &block)
      def perfetto_slices(serial, track, target, &block) = spilled.perfetto_slices(serial, track, target, &block)
      def perfetto_native(serial, name, target, &block) = spilled.perfetto_native(serial, name, target, &block)
      def perfetto_counter(target, &block) = spilled.perfetto_counter(target, &block)
      def speedscope_events(serial, frames, target, &block) = spilled.speedscope_events(serial, frames, target, &block)

      # A column of the Firefox Profiler's marker table of the thread's intervals (formats/firefox.rb):
      # +column+ 0 the start times, 1 the end times (ms), 2 +texts+[the interval's key] (a name
      # code, or for a run interval with a release cause Engine::FIREFOX_KEYS - REASONS.size + the
      # cause), comma-separated. Returns the number of values.
      def firefox_column(serial, column, texts, target, &block) = spilled.firefox_column(serial, column, texts, target, &block)

      # [[name code, name], ...] of the thread's drawn intervals, in order of first use.
      def speedscope_names(serial) = spilled.speedscope_names(serial).map { |code| [code, NAMES[code]] }

      # True when the thread has an interval with end > start (speedscope draws it).
      def drawn?(serial) = (@drawn ||= spilled.threads.to_h { |row| [row.serial, row.drawn] })[serial] || false

      # All intervals of a thread, collected by one more pass (once, for all threads).
      def intervals_of(serial)
        @all_intervals ||= window_rows([[-ALL, ALL]], ALL).first.group_by(&:thread).transform_values do |rows|
          rows.sort_by!(&:index).map { |row| interval(row) }
        end
        @all_intervals.fetch(serial, [])
      end

      private

      # A ThreadTimeline whose intervals are collected on first use.
      class LazyThread < ThreadTimeline
        def initialize(serial, info, scan)
          super(serial, info, nil)
          @scan = scan
        end

        def intervals = self[:intervals] ||= @scan.intervals_of(serial)
      end

      def thread(serial) = LazyThread.new(serial, @file.thread_info[serial] || ThreadInfo.new(serial: serial, ractor_id: 0), self)

      # Engine::WindowRows, per window.
      def window_rows(windows, limit) = window_pass(windows, limit).windows

      # A pass that collects the intervals of +windows+ only ([start_ns, end_ns] or [start_ns, end_ns,
      # own limit]). Asked for in the middle of other work (the HTML report's, while the CLI's bar
      # says "writing"): the bar shows this pass, then that work again, never a pass that is over.
      def window_pass(windows, limit)
        resumed = [@progress.label, @progress.total_bytes] if @progress.respond_to?(:label) && @progress.respond_to?(:phase)
        run_pass(windows: windows.map { |start_ns, end_ns, own| [start_ns, end_ns, own || limit] }, windows_only: true,
                 label: "reading the timeline's intervals of")
      ensure
        @progress.phase(*resumed) if resumed
      end

      def interval(row)
        Interval.new(row.thread, STATES[row.state], row.start_ns, row.end_ns, REASONS[row.reason], row.native,
                     row.site_id.zero? ? nil : @file.stack(row.site_id))
      end

      # Model::Samples of Engine::SampleColumns.
      def samples_of(found)
        found.times.each_index.map do |at|
          Sample.new(found.times[at], found.holders[at], @file.stack(found.stack_ids[at]), found.waiters[at])
        end
      end

      # The pass that analysed the trace (rows, blame, histograms, code locations, overview).
      def pass
        @pass ||= run_pass(bins: @bins, blame: true, code: stacks?, spill: @spilled && @analyse)
      end

      # The pass that kept the intervals for the exports.
      def spilled
        return @spilled_pass ||= pass if @spilled && @analyse

        @spilled_pass ||= run_pass(spill: true, stats: false)
      end

      # Whichever pass ran: every pass knows the threads, their order, the samples and the native
      # threads.
      def any_pass = @pass || @spilled_pass || pass

      def index_of(file)
        index = if file.chunk_index
                  Engine::Index.open(file.data_path, file.args?, file.chunk_index)
                else
                  Engine::Index.imported(file.times.pack("q<*"), file.kinds.map { |kind| KIND_CODES.fetch(kind) }.pack("C*"),
                                         file.threads.pack("L<*"))
                end
        phase("reading #{file.path}")
        step(index)
        return index unless file.chunk_index

        summary = index.summary
        file.indexed(events: summary.events, stack_records: summary.stack_records, last_time: summary.last_time,
                     serials: index.serials, bad_kind: summary.bad_kind, bad_byte: summary.bad_byte)
        index
      end

      def run_pass(bins: nil, blame: false, code: false, spill: false, windows: nil, windows_only: false, stats: true,
                   label: "analysing")
        pass = Engine::Pass.create(
          @index,
          { timeslice_ns: @file.timeslice_ns, duration_ns: duration_ns, stack_causes: stack_causes,
            cpu_ticks: cpu_sampled? ? @file.cpu_ticks : nil, cpu_samples: cpu_sampled? ? @file.cpu_samples : nil,
            threads: @file.thread_info.flat_map { |serial, info| [serial, info.ractor_id] }.pack("L<*"),
            bins: bins, blame: blame, code: code, spill: spill, spill_dir: Dir.tmpdir, windows: windows,
            windows_only: windows_only, median_budget: @exact_medians, stats: stats }
        )
        @passes += 1
        phase("#{label} #{@file.path}")
        step(pass)
        pass
      end

      # A byte per stack id: the release cause its top frame tells (Vocabulary.release_cause), 0
      # for an id the trace has no stack for.
      def stack_causes
        @stack_causes ||= begin
          ids = stacks? ? @file.stack_ids : []
          causes = "\0".b * (ids.max.to_i + 1)
          ids.each { |id| causes.setbyte(id, REASONS.index(Vocabulary.release_cause(@file.stack(id)))) }
          causes
        end
      end

      def phase(label)
        @progress.phase(label, @file.chunk_index ? @file.data_bytes : nil) if @progress.respond_to?(:phase)
      end

      # Runs a pass in steps, telling the progress how far it got after each.
      def step(reader)
        loop do
          done = reader.step(STEP_BYTES)
          @progress&.advance_to(reader.bytes_done)
          break if done
        end
      end
    end
  end
end
