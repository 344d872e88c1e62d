# frozen_string_literal: true

require_relative "native"
require_relative "event_loops"
require_relative "trace"
require_relative "../support/units"
require_relative "../support/vocabulary"
require_relative "../support/counters"

module GVLScope
  # Always-on GVL metrics from the same hook as the trace: how much of the time the GVL is held,
  # how long threads wait for it, and log2 histograms of hold times, wait times and threads still
  # waiting at each acquire (DTrace `quantize` buckets).
  #
  #   GVLScope::Metrics.enable
  #   before = GVLScope::Metrics.snapshot
  #   ... work ...
  #   interval = GVLScope::Metrics.snapshot - before
  #   interval.held_ratio  # => 0.93
  #   puts interval        # table and histograms
  module Metrics
    # A thread's counters and which of them are maxima (the longest_*), as ext/gvlscope/metrics.h
    # declares them once (GVLS_THREAD_COUNTERS); ROW: a packed row's fields, identity then counters.
    COUNTERS = Native::THREAD_COUNTERS
    MAX_COUNTERS = Native::MAXIMUM_COUNTERS
    ROW = Native::THREAD_ROW
    HISTOGRAMS = %i[hold_histogram wait_histogram waiters_at_acquire_histogram].freeze
    BUCKETS = Log2::BUCKETS

    # Counters of one thread (or of exited threads together). run_ns: holding the GVL running Ruby
    # (GC excluded); wait_ns: runnable, waiting for the GVL; idle_ns: blocked (IO, sleep, locks);
    # gc_ns: holding the GVL in GC. io_overlap_wait_ns: the part of wait_ns that IO the thread had
    # started overlapped (a write returned at once, the thread waited for the GVL back, then its
    # read blocked: the answer was on its way during that wait; docs/metrics.md).
    # (Built by position where many are made at once, a snapshot of hundreds of threads: keyword
    # arguments cost 5 us a row.)
    ThreadRow = Struct.new(:name, *ROW) do
      include Counters::Sums
      include Counters::Releases
    end

    class << self
      # Starts counting from now. Returns false if it was already on.
      def enable
        Native.metrics_enable(GVLScope.timeslice_us * 1000)
      end

      # Stops counting (the hook is removed when no trace needs it). Returns false if it was off.
      def disable
        Native.metrics_disable
      end

      def enabled?
        Native.metrics_enabled?
      end

      # Zeroes every counter and histogram (event loops' turns too); wall time restarts now.
      def reset
        raise Error, "metrics are not enabled (GVLScope::Metrics.enable)" unless enabled?

        Native.metrics_reset
        Native.loop_turns_reset
        nil
      end

      # A frozen Snapshot of every counter since enable/reset (subtract two for an interval).
      def snapshot
        raise Error, "metrics are not enabled (GVLScope::Metrics.enable)" unless enabled?

        Snapshot.from_native(Native.metrics_snapshot, loops: EventLoops.turns)
      end

      # The calling thread's counters (like gvltools' LocalTimer), as a ThreadRow.
      def current_thread
        raise Error, "metrics are not enabled (GVLScope::Metrics.enable)" unless enabled?

        Snapshot.row_from(Native.metrics_thread(Thread.current), name: Thread.current.name, serial: nil,
                                                                 ractor_id: nil, state: :run, exited: false)
      end

      # Prometheus text exposition of a snapshot (see Snapshot#to_prometheus).
      def prometheus(snapshot = self.snapshot, **labels)
        snapshot.to_prometheus(**labels)
      end
    end

    # Everything counted between enable/reset and the moment it was taken. Taking one only copies
    # packed numbers; rows and histograms are unpacked when first read.
    class Snapshot
      STATES = Vocabulary::METRIC_STATES
      ROW_FIELDS = ROW.size

      SERIAL = ROW.index(:serial)

      # What Native.metrics_snapshot packed, kept until read: the rows' threads (Threads, or names of
      # those that exited), the rows (ROW_FIELDS uint64 each) and the histograms (BUCKETS each).
      Packed = Struct.new(:threads, :rows, :histograms)

      # The label of the row of the threads that exited earlier, together.
      EXITED_LABEL = "(exited threads)"

      include Counters::Sums
      include Counters::Releases

      attr_reader :taken_ns, :wall_ns, :waiting_threads_by_ractor
      # The event loops' turns (EventLoops::Turns; EventLoops::NONE without a loop).
      attr_reader :loops

      # +totals+: the counters over all rows, when the caller has them (Native.snapshot_rows_summary:
      # the live socket's answer, which writes the rows itself and unpacks none).
      def self.from_native((now_ns, epoch_ns, waiting, threads, rows, histograms), totals: nil, loops: EventLoops::NONE)
        new(taken_ns: now_ns, wall_ns: now_ns - epoch_ns, waiting_threads_by_ractor: waiting,
            packed: Packed.new(threads, rows, histograms), totals: totals, loops: loops)
      end

      def self.row_from(counters, **identity)
        ThreadRow.new(**identity, **COUNTERS.zip(counters).to_h).freeze
      end

      # thread: a Thread, or the name of one that exited (read at its exit: its Thread is let go).
      # An unnamed live thread is labelled with where it was created, as in a trace.
      def self.thread_label(thread, serial, cwd = Vocabulary.working_directory)
        return Vocabulary.thread_label(thread, serial) if thread.is_a?(String)

        name = thread.name
        site = Vocabulary.short_site(Native.thread_created_at(thread), cwd) if name.nil? || name.empty?
        Vocabulary.thread_label(name, serial, main: thread == Thread.main, created_at: site)
      rescue StandardError
        Vocabulary.thread_label(nil, serial)
      end

      # +labels+ with each label several threads share told apart by the thread's serial
      # ("processor #7"), as Model.mark_namesakes does in a trace. +serials+: the threads' serials;
      # a nil label stays nil.
      # (No object per label: the live socket's answer runs this for thousands of threads.)
      def self.distinct_labels(labels, serials)
        counts = labels.compact.tally
        Array.new(labels.size) do |index|
          label = labels[index]
          label && counts[label] > 1 ? Vocabulary.thread_label(label, serials[index], namesake: true) : label
        end
      end

      def initialize(taken_ns:, wall_ns:, waiting_threads_by_ractor:, packed: nil, threads: nil, exited: nil,
                     histograms: nil, totals: nil, loops: EventLoops::NONE)
        @taken_ns = taken_ns
        @loops = loops
        @wall_ns = wall_ns
        @waiting_threads_by_ractor = waiting_threads_by_ractor.freeze
        @packed = packed
        @rows = threads && [*threads, exited].freeze
        @totals = totals ? COUNTERS.zip(totals).to_h : {}
        @totals[:histograms] = histograms if histograms
        freeze
      end

      # One ThreadRow per thread seen since enable/reset and alive at the last snapshot.
      def threads = rows[0...-1]

      # Threads that exited before the previous snapshot, added together.
      def exited = rows.last

      # The Thread objects of #threads, in the same order (nil for one gone meanwhile); empty for
      # a difference of snapshots.
      def ruby_threads = @packed ? @packed.threads.first(threads.size) : []

      def all_rows = rows

      COUNTERS.each do |counter|
        if MAX_COUNTERS.include?(counter)
          define_method(counter) { @totals[counter] ||= rows.map(&counter).max || 0 }
        else
          define_method(counter) { @totals[counter] ||= rows.sum(&counter) }
        end
      end
      # Histograms are Arrays of 64 counts, all threads together: bucket b >= 1 counts values in
      # [2^(b-1), 2^b) (ns, or threads for waiters_at_acquire), bucket 0 counts zeros.
      HISTOGRAMS.each_with_index do |histogram, index|
        define_method(histogram) { histograms[index] }
      end

      def histograms
        @totals[:histograms] ||= @packed.histograms.unpack("Q<*").each_slice(BUCKETS).to_a.freeze
      end

      # held_ns: time some thread held the GVL (running Ruby or in GC), all Ractors together (Counters::Sums).
      def acquisitions = waits

      # Share of wall time the GVL was held. With several Ractors (each has its own GVL) this can
      # exceed 1: see held_ratio_by_ractor.
      def held_ratio(whole_ns = wall_ns) = super

      def held_ratio_by_ractor
        threads.group_by(&:ractor_id).transform_values { |rows| Counters.ratio(rows.sum(&:held_ns), wall_ns) }
      end

      # Threads waiting for the GVL when the snapshot was taken.
      def waiting_threads = waiting_threads_by_ractor.values.sum

      # The interval between two snapshots: counters subtract, maxima keep the later value.
      def -(other)
        rows, exited_diff = Counters.interval_rows(threads, exited, other.threads, other.exited) do |row, before|
          ThreadRow.new(**Counters.subtract(row.to_h, before, COUNTERS, MAX_COUNTERS)).freeze
        end
        Snapshot.new(taken_ns: taken_ns, wall_ns: taken_ns - other.taken_ns, threads: rows,
                     exited: exited_diff, waiting_threads_by_ractor: waiting_threads_by_ractor,
                     histograms: histograms.zip(other.histograms).map { |now, before| now.zip(before).map { |a, b| a - b } },
                     loops: loops - other.loops)
      end

      # The rows, unpacked on first use (a frozen object can still fill its own cache Hash).
      def rows
        @totals[:rows] ||= @rows || unpack_rows
      end

      def to_h
        {
          wall_ns: wall_ns, held_ns: held_ns, held_ratio: held_ratio, held_ratio_by_ractor: held_ratio_by_ractor,
          wait_ns: wait_ns, waiting_threads: waiting_threads, acquisitions: acquisitions,
          releases: { blocking: released_blocking, preempted: released_preempted, exit: released_exit },
          hold_histogram: hold_histogram, wait_histogram: wait_histogram,
          waiters_at_acquire_histogram: waiters_at_acquire_histogram,
          threads: all_rows.map(&:to_h),
        }
      end

      def to_s
        require_relative "../formats/metrics_text"
        Formats::MetricsText.new(self).to_s
      end

      def to_prometheus(**labels)
        require_relative "../formats/prometheus"
        Formats::Prometheus.exposition(self, **labels)
      end

      private

      def unpack_rows
        threads = @packed.threads
        numbers = @packed.rows.unpack("Q<*")
        fields = threads.each_index.map { |i| numbers[i * ROW_FIELDS, ROW_FIELDS] }
        serials = fields.map { |values| values[SERIAL] }
        cwd = Vocabulary.working_directory
        labels = self.class.distinct_labels(threads.zip(serials).map { |thread, serial| thread && self.class.thread_label(thread, serial, cwd) },
                                            serials)
        fields.zip(labels).map do |values, label|
          row = ThreadRow.new(label || EXITED_LABEL, *values) # ThreadRow's fields after name are ROW's
          row.state = STATES[row.state]
          row.exited = row.exited == 1
          row.freeze
        end.freeze
      end
    end
  end

  # What GVLScope.measure returns: the block's value and the calling thread's GVL times.
  Measurement = Struct.new(:value, :run_ns, :wait_ns, :idle_ns, :gc_ns, keyword_init: true) do
    include Counters::Sums # total_ns, held_ns
  end

  # Runs the block and splits the calling thread's time in it into running (holding the GVL),
  # waiting for the GVL, idle (blocked on IO, sleep, locks) and GC. Turns metrics on for the
  # block if they were off.
  def self.measure
    enabled_here = Metrics.enable
    before = Native.metrics_thread(Thread.current)
    value = yield
    after = Native.metrics_thread(Thread.current)
    interval = Metrics::COUNTERS.zip(after, before).to_h { |counter, later, earlier| [counter, later - earlier] }
    Measurement.new(value: value, **interval.slice(:run_ns, :wait_ns, :idle_ns, :gc_ns))
  ensure
    Metrics.disable if enabled_here
  end
end
