# frozen_string_literal: true

require "json"
require "set"
require_relative "../support/errors"
require_relative "../support/units"
require_relative "../support/printable"
require_relative "../support/vocabulary"
require_relative "../support/counters"
require_relative "../recorder/native"
require_relative "rules"

module GVLScope
  module Live
    # What a live source says about a running process at one moment, as plain data that
    # round-trips through JSON (to_h / Snapshot.from_h / to_json): the GVL counters since metrics
    # were enabled there, per-thread rows, and the gauge of threads waiting now. Two snapshots of
    # the same source subtract (later - earlier) into an interval whose counters cover only the
    # time between them; `gvlscope top` shows intervals, `gvlscope advise` reads them.
    #
    # Times are in ns. Counters are cumulative in a snapshot and per interval in a difference;
    # interval_ns says which span they cover. A Prometheus scrape has no per-thread rows (threads
    # is empty, workers has a row per Puma worker) and no run/gc/idle split (those are nil).
    class Snapshot
      VERSION = 1
      SOURCES = %w[socket prometheus].freeze
      RELEASE_CAUSES = %i[blocking preempted exit].freeze
      HISTOGRAMS = %i[hold_histogram wait_histogram waiters_at_acquire_histogram].freeze
      DEFAULT_TIMESLICE_NS = 100_000_000 # CRuby's; a scrape does not say the target's

      # One thread's counters (run_ns, wait_ns, idle_ns, gc_ns: docs/metrics.md), its state at the
      # moment of the snapshot (vocabulary.rb's words), and where its code was (+code+: nil, or a
      # Hash: "at" => "Class#method (file:line)" where it was at the snapshot, when asked for with
      # stacks; `gvlscope top` adds "holding" and "released_at" from a trace with stacks).
      # io_overlap_wait_ns: the part of wait_ns that IO the thread had started overlapped (Metrics).
      # loop: the thread's event loop (LoopRow), nil for a thread without one (and in a snapshot
      # written before gvlscope carried loops: the key is added, the version stays).
      # The fields of THREAD_FIELDS that are numbers: a thread's counters as the recorder declares
      # them (ext/gvlscope/metrics.h, Native::THREAD_COUNTERS; the longest_* are maxima).
      THREAD_NUMBERS = Native::THREAD_COUNTERS
      # A snapshot file's thread fields, in its order: code comes before io_overlap_wait_ns (version 1
      # files have it there), loop last.
      THREAD_FIELDS = [:serial, :label, :ractor_id, :state, :exited,
                       *THREAD_NUMBERS.flat_map { |field| field == :io_overlap_wait_ns ? [:code, field] : [field] },
                       :loop].freeze

      # A thread's event loop (GVLScope::EventLoops, ext/gvlscope/fibers.c): the turns its loop gave
      # its fibers, the time they kept the thread (busy_ns), the longest, and the Log2 histogram of
      # their lengths. Cumulative in a snapshot; in a difference, the interval's (longest_turn_ns:
      # see #-).
      LOOP_FIELDS = %i[turns busy_ns longest_turn_ns turn_histogram].freeze
      # The packed rows of Native.loop_rows: Native::LOOP_ROW's numbers (serial, then LOOP_FIELDS'),
      # then the histogram's Log2::BUCKETS counts.
      LOOP_ROW_NUMBERS = (Native::LOOP_ROW - [:turn_histogram]).freeze
      LOOP_ROW_FIELDS = LOOP_ROW_NUMBERS.size + Log2::BUCKETS
      LoopRow = Struct.new(*LOOP_FIELDS) do
        def self.of(turns:, busy_ns:, longest_turn_ns:, turn_histogram:)
          new(turns, busy_ns, longest_turn_ns, Array.new(Log2::BUCKETS) { |i| turn_histogram.fetch(i, 0).to_i }.freeze).freeze
        end

        def self.from_h(hash) = of(**LOOP_FIELDS.to_h { |field| [field, hash[field.to_s] || (field == :turn_histogram ? [] : 0)] })

        def to_h
          { "turns" => turns, "busy_ns" => busy_ns, "longest_turn_ns" => longest_turn_ns,
            "turn_histogram" => turn_histogram.first((turn_histogram.rindex(&:positive?) || -1) + 1) }
        end

        # The loop lag: how late the loop came back to its select at the 99th percentile of its turns
        # (docs/fibers.md, Node.js' event-loop delay): the upper bound of the Log2 bucket holding the
        # p99 turn, at most the longest turn; 0 without turns.
        def lag_ns
          bucket = Log2.quantile_bucket(turn_histogram, 0.99) or return 0
          [Log2.upper(bucket), longest_turn_ns].min
        end

        def busy_share(interval_ns) = interval_ns.positive? ? busy_ns.fdiv(interval_ns) : 0.0
        def turns_per_s(interval_ns) = interval_ns.positive? ? turns * 1e9 / interval_ns : 0.0

        # The interval from +earlier+ (a LoopRow, nil: no turns then). Counts subtract (never below
        # zero: a Metrics.reset starts them again). The longest turn is the interval's: exactly the
        # later maximum when it grew (that turn ended in the interval), else the upper bound of the
        # interval's highest non-empty bucket, at most the maximum so far.
        def -(earlier)
          return self unless earlier

          histogram = turn_histogram.zip(earlier.turn_histogram).map { |now, was| [now - was, 0].max }
          top = histogram.rindex(&:positive?)
          longest = if longest_turn_ns > earlier.longest_turn_ns then longest_turn_ns
                    elsif top then [Log2.upper(top), longest_turn_ns].min
                    else 0
                    end
          LoopRow.new([turns - earlier.turns, 0].max, [busy_ns - earlier.busy_ns, 0].max, longest, histogram.freeze).freeze
        end
      end

      # Built and written by position: a snapshot of hundreds of threads is answered in ms.
      ThreadRow = Struct.new(*THREAD_FIELDS) do
        include Counters::Sums
        include Counters::Releases

        def to_h
          hash = THREAD_FIELDS.to_h { |field| [field.to_s, self[field]] }
          hash["state"] = state&.to_s
          loop ? hash["loop"] = loop.to_h : hash.delete("loop")
          hash
        end

        def self.from_h(hash)
          values = THREAD_FIELDS.to_h { |field| [field, hash[field.to_s]] }
          values[:state] = values[:state]&.to_sym
          values[:exited] = values[:exited] ? true : false
          values[:loop] = values[:loop] && LoopRow.from_h(values[:loop])
          THREAD_NUMBERS.each { |field| values[field] ||= 0 }
          new(**values).freeze
        end
      end

      # One Puma worker's numbers from a scrape (labels worker and pid; nil when absent).
      WORKER_FIELDS = %i[worker pid wall_ns held_ns wait_ns waiting_threads].freeze
      WorkerRow = Struct.new(*WORKER_FIELDS, keyword_init: true) do
        def held_ratio = wall_ns.positive? ? held_ns.fdiv(wall_ns) : 0.0
        def to_h = super.transform_keys(&:to_s)
        def self.from_h(hash) = new(**WORKER_FIELDS.to_h { |field| [field, hash[field.to_s]] }).freeze
      end

      COUNTERS = %i[wall_ns held_ns run_ns gc_ns wait_ns idle_ns acquisitions].freeze
      FIELDS = %i[source pid time_ns interval_ns processes waiting_threads releases threads exited_threads workers
                  findings trace_path timeslice_ns breakdown].freeze
      # Per-route and per-job numbers (GVLScope::Breakdown, what GVLScope::Rack and GVLScope::Sidekiq
      # count), one Hash per series: kind ("route" or "job"), label, tags, and these cumulative sums
      # (io_overlap_wait_ns is nil where the source did not have it: older gvlscope, a file), and
      # wait_buckets: Log2 counts of each request's (job run's) GVL wait, nil where the source did not
      # have them (a scrape, an older file).
      BREAKDOWN_NUMBERS = %i[count run_ns wait_ns idle_ns gc_ns duration_ns pickup_wait_ns io_overlap_wait_ns].freeze

      attr_reader(*COUNTERS, *HISTOGRAMS, *FIELDS)

      # Keyword arguments are the fields of to_h (symbols). Only wall_ns, held_ns and wait_ns are
      # required; what a source cannot know stays nil (or empty).
      def initialize(source:, time_ns:, wall_ns:, held_ns:, wait_ns:, pid: nil, interval_ns: nil, processes: 1,
                     run_ns: nil, gc_ns: nil, idle_ns: nil, acquisitions: 0, waiting_threads: 0, releases: {},
                     hold_histogram: [], wait_histogram: [], waiters_at_acquire_histogram: [], threads: [],
                     exited_threads: nil, workers: [], findings: [], trace_path: nil,
                     timeslice_ns: DEFAULT_TIMESLICE_NS, breakdown: [])
        @source = source.to_s
        @pid = pid
        @time_ns = time_ns
        @wall_ns = wall_ns
        @processes = processes
        # A snapshot covers the time since metrics were enabled (per process); a difference, the
        # time between its two snapshots.
        @interval_ns = interval_ns || (processes.positive? ? wall_ns / processes : wall_ns)
        @held_ns = held_ns
        @run_ns = run_ns
        @gc_ns = gc_ns
        @wait_ns = wait_ns
        @idle_ns = idle_ns
        @acquisitions = acquisitions
        @waiting_threads = waiting_threads
        @releases = RELEASE_CAUSES.to_h { |cause| [cause, (releases[cause] || releases[cause.to_s]).to_i] }.freeze
        @hold_histogram = padded(hold_histogram)
        @wait_histogram = padded(wait_histogram)
        @waiters_at_acquire_histogram = padded(waiters_at_acquire_histogram)
        @threads = threads.freeze
        @exited_threads = exited_threads
        @workers = workers.freeze
        @findings = findings.freeze
        @trace_path = trace_path
        @timeslice_ns = timeslice_ns || DEFAULT_TIMESLICE_NS
        @breakdown = Array(breakdown).map { |entry| Snapshot.breakdown_entry(entry) }.freeze
        freeze
      end

      # Share of the covered wall time some thread held the GVL (running Ruby or in GC), all
      # Ractors of a process together (it can exceed 1 with several Ractors: held_ratio_by_ractor);
      # for several Puma workers, their mean.
      def held_ratio = Counters.ratio(held_ns, wall_ns)

      # The busiest Ractor's held share (one GVL's, at most 1), held_ratio without thread rows.
      def busiest_held_ratio = threads.empty? ? held_ratio : held_ratio_by_ractor.values.max

      # { ractor_id => held share } from the thread rows (empty for a scrape).
      def held_ratio_by_ractor
        threads.group_by(&:ractor_id).transform_values { |rows| Counters.ratio(rows.sum(&:held_ns), wall_ns) }
      end

      # Nanoseconds threads spent waiting for the GVL per second of wall time (per process): 1e9
      # means that on average one thread was always waiting.
      def wait_ns_per_s = wall_ns.positive? ? wait_ns * 1e9 / wall_ns : 0.0

      # The interval from +earlier+ to this snapshot (same source and process): counters subtract,
      # gauges (state, waiting_threads, longest_*) keep this snapshot's values. Threads that exited
      # in between move from their rows into exited_threads, as Metrics::Snapshot#- does.
      def -(earlier)
        unless earlier.source == source && earlier.pid == pid
          raise Error, "cannot subtract a snapshot of #{earlier.source} pid #{earlier.pid} from one of #{source} pid #{pid}"
        end

        rows, exited = Counters.interval_rows(threads, exited_threads, earlier.threads, earlier.exited_threads) do |row, old|
          subtract_row(row, old)
        end
        earlier_workers = earlier.workers.to_h { |row| [[row.worker, row.pid], row] }
        workers = self.workers.map { |row| (old = earlier_workers[[row.worker, row.pid]]) ? subtract_worker(row, old) : row }
        counters = COUNTERS.to_h do |counter|
          [counter, public_send(counter) && earlier.public_send(counter) && public_send(counter) - earlier.public_send(counter)]
        end
        # A restarted Puma worker's counters start again from zero: the sum of the workers' own
        # intervals (a new worker counts whole) never goes down.
        %i[wall_ns held_ns wait_ns].each { |counter| counters[counter] = workers.sum(&counter) } unless workers.empty?
        histograms = HISTOGRAMS.to_h do |name|
          [name, public_send(name).zip(earlier.public_send(name)).map { |now, was| [now - was, 0].max }]
        end
        # Per-route/per-job sums are cumulative too: the interval's are later minus earlier, by series.
        before_series = earlier.breakdown.to_h { |entry| [entry.values_at(:kind, :label, :tags), entry] }
        breakdown = self.breakdown.map do |entry|
          old = before_series[entry.values_at(:kind, :label, :tags)]
          next entry unless old

          buckets = entry[:wait_buckets] && old[:wait_buckets] && entry[:wait_buckets].zip(old[:wait_buckets]).map { |now, was| [now - was, 0].max }
          entry.merge(BREAKDOWN_NUMBERS.to_h { |key| [key, entry[key] && old[key] && entry[key] - old[key]] }, wait_buckets: buckets)
        end
        interval = self.class.new(
          source: source, pid: pid, time_ns: time_ns, interval_ns: time_ns - earlier.time_ns, processes: processes,
          breakdown: breakdown,
          waiting_threads: waiting_threads, releases: releases.to_h { |cause, count| [cause, count - earlier.releases[cause]] },
          threads: rows, exited_threads: exited, workers: workers, trace_path: trace_path, timeslice_ns: timeslice_ns,
          **counters, **histograms
        )
        interval.with(findings: Rules.findings(interval))
      end

      # A copy with some fields replaced (findings, code locations in threads).
      def with(**changes) = self.class.new(**to_fields, **changes)

      def to_h
        {
          "version" => VERSION, "source" => source, "pid" => pid, "time_ns" => time_ns, "interval_ns" => interval_ns,
          "processes" => processes, "wall_ns" => wall_ns, "held_ns" => held_ns, "run_ns" => run_ns, "gc_ns" => gc_ns,
          "wait_ns" => wait_ns, "idle_ns" => idle_ns, "held_ratio" => held_ratio,
          "held_ratio_by_ractor" => held_ratio_by_ractor.transform_keys(&:to_s), "wait_ns_per_s" => wait_ns_per_s,
          "waiting_threads" => waiting_threads, "acquisitions" => acquisitions,
          "releases" => releases.transform_keys(&:to_s),
          **HISTOGRAMS.to_h { |name| [name.to_s, trimmed(public_send(name))] },
          "threads" => threads.map(&:to_h), "exited_threads" => exited_threads&.to_h,
          "workers" => workers.map(&:to_h), "findings" => findings, "trace_path" => trace_path, "timeslice_ns" => timeslice_ns,
          "breakdown" => breakdown.map { |entry| breakdown_hash(entry) }
        }
      end

      def to_json(*args) = to_h.to_json(*args)

      # A number beyond this (ns, or a count) is none gvlscope writes: 2^63 ns is 292 years.
      MAX_NUMBER = 2**63

      # The inverse of to_h (derived keys such as held_ratio are recomputed, not read). Every field
      # read is checked for its type and range: a file edited by hand or broken is refused in one
      # line naming the field, before any number reaches the advisor.
      def self.from_h(hash)
        unless hash.is_a?(Hash) && hash["version"] == VERSION && SOURCES.include?(hash["source"])
          raise Error, "not a gvlscope live snapshot (version #{VERSION}): #{hash.inspect[0, 80]}"
        end

        new(
          source: hash["source"], pid: number(hash, "pid", min: 1), time_ns: number(hash, "time_ns", required: true),
          interval_ns: number(hash, "interval_ns"), processes: number(hash, "processes", min: 1) || 1,
          **COUNTERS.to_h { |counter| [counter, number(hash, counter.to_s, required: %i[wall_ns held_ns wait_ns].include?(counter))] },
          waiting_threads: number(hash, "waiting_threads") || 0,
          releases: RELEASE_CAUSES.to_h { |cause| [cause, number(typed(hash, "releases", Hash) || {}, cause.to_s, within: "releases") || 0] },
          **HISTOGRAMS.to_h { |name| [name, histogram(hash, name.to_s)] },
          threads: rows(hash, "threads").each_with_index.map { |row, index| thread_row_of(row, "threads[#{index}]") },
          exited_threads: typed(hash, "exited_threads", Hash) && thread_row_of(hash["exited_threads"], "exited_threads"),
          workers: rows(hash, "workers").each_with_index.map { |row, index| worker_row_of(row, "workers[#{index}]") },
          findings: rows(hash, "findings"), trace_path: text(hash, "trace_path"),
          timeslice_ns: number(hash, "timeslice_ns", min: 1),
          breakdown: rows(hash, "breakdown").each_with_index.map { |entry, index| breakdown_of(entry, "breakdown[#{index}]") }
        )
      rescue ArgumentError, TypeError, NoMethodError => e
        raise Error, "not a gvlscope live snapshot: #{e.message}"
      end

      # The checks of from_h: each returns the field's value (nil when absent and not required), or
      # raises GVLScope::Error naming it.
      class << self
        private

        def refuse(field, value, expected)
          raise Error, "not a gvlscope live snapshot: #{field} is #{value.inspect[0, 40]}, not #{expected}"
        end

        def typed(hash, key, type, within: nil)
          value = hash[key]
          value.nil? || value.is_a?(type) ? value : refuse([within, key].compact.join("."), value, type == Hash ? "an object" : "a list")
        end

        # A whole number in min...MAX_NUMBER (a finite Float is cut to one, as Integer() does).
        def number(hash, key, min: 0, required: false, within: nil)
          value = hash[key]
          return nil if value.nil? && !required

          number = value.is_a?(Float) && value.finite? ? value.to_i : value
          return number if number.is_a?(Integer) && number >= min && number < MAX_NUMBER

          refuse([within, key].compact.join("."), value, "a whole number from #{min} to 2^63")
        end

        # A String that is valid UTF-8 (a JSON "\ud800" is not), or nil.
        def text(hash, key, within: nil)
          value = hash[key]
          return value if value.nil? || (value.is_a?(String) && value.valid_encoding?)

          refuse([within, key].compact.join("."), value, "a text")
        end

        def rows(hash, key) = typed(hash, key, Array) || []

        # An object of text keys and plain values (a thread's code, a series' tags).
        def texts(hash, field)
          hash.each do |key, value|
            refuse(field, key, "a text key") unless key.is_a?(String) && key.valid_encoding?
            text(hash, key, within: field) unless [Integer, Float, TrueClass, FalseClass].any? { |type| value.is_a?(type) }
          end
        end

        def histogram(hash, key, within: nil)
          counts = rows(hash, key)
          name = [within, key].compact.join(".")
          refuse(name, counts, "at most #{Log2::BUCKETS} counts") if counts.size > Log2::BUCKETS
          counts.each_index.map { |index| number(counts, index, within: name) }
        end

        def object(value, field) = value.is_a?(Hash) ? value : refuse(field, value, "an object")

        # (Built by position: `top` reads a snapshot of thousands of threads every second.)
        def thread_row_of(row, field)
          object(row, field)
          # (a file's names reach a terminal as a trace's do: control characters escaped)
          label = text(row, "label", within: field)&.then { |text| Printable.text(text) }
          code = typed(row, "code", Hash, within: field)
          texts(code, "#{field}.code") if code
          code = code.transform_values { |value| value.is_a?(String) ? Printable.text(value) : value } if code
          values = THREAD_NUMBERS.to_h { |key| [key, number(row, key.to_s, within: field) || 0] }
          values.update(serial: number(row, "serial", within: field), label: label,
                        ractor_id: number(row, "ractor_id", within: field), state: text(row, "state", within: field)&.to_sym,
                        exited: row["exited"] ? true : false, code: code,
                        loop: typed(row, "loop", Hash, within: field) && loop_row_of(row["loop"], "#{field}.loop"))
          ThreadRow.new(*values.values_at(*THREAD_FIELDS)).freeze
        end

        def loop_row_of(loop, field)
          LoopRow.of(**%i[turns busy_ns longest_turn_ns].to_h { |key| [key, number(loop, key.to_s, within: field) || 0] },
                     turn_histogram: histogram(loop, "turn_histogram", within: field))
        end

        def worker_row_of(row, field)
          object(row, field)
          WorkerRow.from_h({ "worker" => number(row, "worker", within: field), "pid" => number(row, "pid", min: 1, within: field),
                             **%w[wall_ns held_ns wait_ns].to_h { |key| [key, number(row, key, required: true, within: field)] },
                             "waiting_threads" => number(row, "waiting_threads", within: field) || 0 })
        end

        # A hand-edited sum below zero still reads (the advisor counts it as none).
        def breakdown_of(entry, field)
          object(entry, field)
          tags = entry["tags"].is_a?(Hash) ? entry["tags"] : {}
          texts(tags, "#{field}.tags")
          { "kind" => text(entry, "kind", within: field), "label" => text(entry, "label", within: field), "tags" => tags,
            **BREAKDOWN_NUMBERS.to_h { |key| [key.to_s, number(entry, key.to_s, min: -MAX_NUMBER + 1, within: field)] },
            "wait_buckets" => typed(entry, "wait_buckets", Array, within: field) && histogram(entry, "wait_buckets", within: field) }
        end
      end

      def self.from_json(text)
        from_h(JSON.parse(text))
      rescue JSON::ParserError => e
        raise Error, "not a gvlscope live snapshot: #{e.message.lines.first.strip}"
      end

      # The snapshots of a snapshot file (`gvlscope advise` and `diff` read it): one JSON object, a
      # JSON array, or one object per line (what `gvlscope top --once --json` prints, run twice).
      # Returns [later, earlier or nil]: their per-request/per-job entries ("breakdown") are in them.
      def self.read_file(path)
        raise Error, "#{path}: no such file" unless File.exist?(path)
        raise Error, "#{path}: is a directory, not a snapshot" if File.directory?(path)

        text = File.read(path, mode: "r:UTF-8")
        # JSON is UTF-8: other bytes made the line-by-line fallback fail on the encoding.
        raise Error, "#{path}: not JSON (not UTF-8 text)" unless text.valid_encoding?

        hashes = begin
          parsed = JSON.parse(text)
          parsed.is_a?(Array) ? parsed : [parsed]
        rescue JSON::ParserError
          begin
            text.each_line.reject { |line| line.strip.empty? }.map { |line| JSON.parse(line) }
          rescue JSON::ParserError => e
            raise Error, "#{path}: not JSON (#{e.message.lines.first.strip})"
          end
        end
        raise Error, "#{path}: holds no snapshot" if hashes.empty?

        snapshots = hashes.map do |hash|
          from_h(hash)
        rescue Error => e
          raise Error, "#{path}: #{e.message}"
        end
        [snapshots.last, snapshots.size > 1 ? snapshots.first : nil]
      end

      # Code locations one answer looks up: each is a backtrace taken under the host's GVL (tens of
      # µs), and 5,000 of them paused the host 0.2 s per `top` refresh. Past this many threads, the
      # ones waiting for or holding the GVL now come first, then those that held and waited longest.
      CODE_LOCATIONS_MAX = 64
      BUSY_STATES = %i[wait run].freeze

      # A snapshot of this process from a Metrics::Snapshot (what the live socket answers).
      # With +stacks+, the rows of up to CODE_LOCATIONS_MAX threads say where their code is now
      # ("at"): the snapshot is taken holding the GVL, so every other thread is stopped where it
      # runs or waits. +breakdown+: GVLScope::Breakdown::Entry objects (or Hashes) of the same moment.
      # +loops+: { serial => LoopRow } of the threads with an event loop (Snapshot.loop_rows).
      def self.from_metrics(metrics, pid: Process.pid, trace_path: nil, timeslice_ns: DEFAULT_TIMESLICE_NS, stacks: false,
                            breakdown: [], loops: {})
        threads = stacks ? metrics.ruby_threads : []
        located = stacks ? located_rows(metrics.threads.map(&:state), metrics.threads.map { |row| row.run_ns + row.wait_ns }) : []
        cwd = "#{Dir.pwd}/"
        rows = metrics.threads.each_with_index.map do |row, index|
          at = located.include?(index) && threads[index] && code_location(threads[index], cwd)
          thread_row(row, at ? { "at" => at } : nil, loops[row.serial])
        end
        new(
          source: "socket", pid: pid, time_ns: metrics.taken_ns, wall_ns: metrics.wall_ns, held_ns: metrics.held_ns,
          run_ns: metrics.run_ns, gc_ns: metrics.gc_ns, wait_ns: metrics.wait_ns, idle_ns: metrics.idle_ns,
          acquisitions: metrics.acquisitions, waiting_threads: metrics.waiting_threads,
          releases: { blocking: metrics.released_blocking, preempted: metrics.released_preempted, exit: metrics.released_exit },
          **HISTOGRAMS.to_h { |name| [name, metrics.public_send(name)] },
          threads: rows, exited_threads: metrics.exited && thread_row(metrics.exited, nil, loops[0]), trace_path: trace_path, timeslice_ns: timeslice_ns,
          breakdown: breakdown
        )
      end

      # One series of +breakdown+ as a frozen Hash with symbol keys (from an Entry, or a Hash with
      # string or symbol keys, as a snapshot file has it); a number missing is 0 (io_overlap_wait_ns: nil).
      def self.breakdown_entry(entry)
        values = entry.to_h.transform_keys(&:to_sym)
        tags = values[:tags].is_a?(Hash) ? values[:tags].to_h { |key, value| [key.to_s, value] } : {}
        numbers = BREAKDOWN_NUMBERS.to_h { |key| [key, values[key] && Integer(values[key])] }
        BREAKDOWN_NUMBERS.each { |key| numbers[key] ||= 0 unless key == :io_overlap_wait_ns }
        buckets = values[:wait_buckets] && Array.new(Log2::BUCKETS) { |i| Integer(values[:wait_buckets].fetch(i, 0)) }.freeze
        { kind: values[:kind].to_s, label: values[:label].to_s, tags: tags.freeze, **numbers, wait_buckets: buckets }.freeze
      end

      # The indexes of the metrics rows whose code locations an answer looks up (a Set), from each
      # row's state and run_ns + wait_ns (+busy_ns+).
      def self.located_rows(states, busy_ns)
        return Set.new(states.each_index) if states.size <= CODE_LOCATIONS_MAX

        busy_now, others = states.each_index.partition { |index| BUSY_STATES.include?(states[index]) }
        longest = ->(indexes, count) { indexes.max_by(count) { |index| busy_ns[index] } }
        chosen = longest.(busy_now, CODE_LOCATIONS_MAX)
        Set.new(chosen + longest.(others, CODE_LOCATIONS_MAX - chosen.size))
      end

      FRAMES_LOOKED_AT = 8 # a thread's innermost frames, enough to pass Ruby's own (<internal:...>)

      # "Object#spin (app.rb:4)": the innermost frame in a source file, its path shortened as a
      # trace's are (Vocabulary.short_site); nil for a thread without Ruby frames (or the caller itself).
      def self.code_location(thread, cwd = "#{Dir.pwd}/")
        return nil if thread == Thread.current

        frames = thread.backtrace_locations(0, FRAMES_LOOKED_AT) or return nil
        frame = frames.find { |f| f.path && !f.path.start_with?("<internal:") } || frames.first or return nil
        Printable.text("#{Vocabulary.code_label(frame.label)} (#{Vocabulary.short_site(frame.path.to_s, cwd)}:#{frame.lineno})")
      rescue StandardError
        nil
      end

      # A Metrics::ThreadRow as a snapshot's (its name the label, printable).
      def self.thread_row(row, code = nil, loop = nil)
        values = row.to_h.update(label: row.name && Printable.text(row.name), code: code, loop: loop)
        ThreadRow.new(*values.values_at(*THREAD_FIELDS)).freeze
      end

      # { serial => LoopRow } from Native.loop_rows' packed rows (serial 0: the loops of threads
      # that exited, the exited threads' row's).
      def self.loop_rows(packed)
        packed.unpack("Q<*").each_slice(LOOP_ROW_FIELDS).to_h do |values|
          numbers = LOOP_ROW_NUMBERS.zip(values).to_h
          [numbers.delete(:serial), LoopRow.of(**numbers, turn_histogram: values.drop(LOOP_ROW_NUMBERS.size))]
        end
      end

      private

      def to_fields
        {
          source: source, pid: pid, time_ns: time_ns, interval_ns: interval_ns, processes: processes,
          waiting_threads: waiting_threads, releases: releases, threads: threads, exited_threads: exited_threads,
          workers: workers, findings: findings, trace_path: trace_path, timeslice_ns: timeslice_ns, breakdown: breakdown,
          **COUNTERS.to_h { |counter| [counter, public_send(counter)] },
          **HISTOGRAMS.to_h { |name| [name, public_send(name)] }
        }
      end

      # A series as to_h writes it: wait_buckets (when the source had them) without trailing zeros.
      def breakdown_hash(entry)
        hash = entry.transform_keys(&:to_s)
        buckets = hash.delete("wait_buckets")
        buckets ? hash.merge("wait_buckets" => trimmed(buckets)) : hash
      end

      def padded(counts) = Array.new(Log2::BUCKETS) { |i| counts.fetch(i, 0).to_i }.freeze

      def trimmed(counts) = counts.first((counts.rindex(&:positive?) || -1) + 1)

      def subtract_row(row, before)
        values = Counters.subtract(row.to_h.transform_keys(&:to_sym), before, THREAD_NUMBERS, Native::MAXIMUM_COUNTERS)
        values[:state] = row.state
        values[:loop] = row.loop && row.loop - before.loop
        ThreadRow.new(**values).freeze
      end

      def subtract_worker(row, before)
        WorkerRow.new(worker: row.worker, pid: row.pid, wall_ns: row.wall_ns - before.wall_ns,
                      held_ns: row.held_ns - before.held_ns, wait_ns: row.wait_ns - before.wait_ns,
                      waiting_threads: row.waiting_threads).freeze
      end
    end
  end
end
