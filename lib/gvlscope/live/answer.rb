# frozen_string_literal: true

require "json"
require_relative "../recorder/native"
require_relative "../recorder/metrics"
require_relative "../support/printable"
require_relative "../support/vocabulary"
require_relative "snapshot"

module GVLScope
  module Live
    # The live socket's answer to {"get":"snapshot"}: the JSON line of {"snapshot" => Snapshot#to_h}
    # for this process now, the same text Snapshot.from_metrics(...).to_h would give, made while the
    # program runs: no Ruby object per thread (the rows are written in C from the packed metrics,
    # each thread's label is kept from one answer to the next while its name stays), and the GVL
    # given back every ROWS_PER_TURN rows. One Answer per server (it keeps the labels).
    class Answer
      # Rows written between two hand-backs of the GVL (~1 µs each): the program's threads wait
      # for the answer's thread a few ms at most.
      ROWS_PER_TURN = 500
      EXITED_LABEL = Metrics::Snapshot::EXITED_LABEL

      def initialize
        @labels = {}.compare_by_identity # Thread => its Label
        @cwd = nil
        @last_threads = @last_labels = nil # the last answer's threads and their labels
        @size = 0 # the last answer's bytes
      end

      # +stacks+: the rows of up to Snapshot::CODE_LOCATIONS_MAX threads say where their code is.
      # +breakdown+: GVLScope::Breakdown's series of the same moment.
      def json(pid:, trace_path:, timeslice_ns:, stacks:, breakdown:)
        now_ns, epoch_ns, waiting, threads, rows, histograms = Native.metrics_snapshot
        loops = Native.loop_rows # the event loops' turns, by serial (packed: no object per loop)
        totals, held_by_ractor, states, busy_ns = Native.snapshot_rows_summary(rows)
        live = threads.size - 1 # the last row: the threads that exited earlier, together
        Thread.pass
        # The code locations of the threads busiest at the metrics' moment, all at one moment (every
        # other thread is stopped where it runs or waits while this one holds the GVL).
        at = stacks ? code_locations(threads, states, busy_ns) : {}
        Thread.pass
        metrics = Metrics::Snapshot.from_native([now_ns, epoch_ns, waiting, [], "", histograms], totals: totals)
        head = Snapshot.from_metrics(metrics, pid: pid, trace_path: trace_path, timeslice_ns: timeslice_ns,
                                              breakdown: breakdown).to_h
        head["held_ratio_by_ractor"] = held_by_ractor.to_h do |ractor, held|
          [ractor.to_s, metrics.wall_ns.positive? ? held.fdiv(metrics.wall_ns) : 0.0]
        end
        labels = [*labels_of(threads.first(live), rows), EXITED_LABEL]
        # (sized as the last: megabytes grown by doubling were copied twice over)
        text = String.new('{"snapshot":{', capacity: @size + (@size / 8))
        head.each_with_index do |(key, value), index|
          text << "," unless index.zero?
          text << JSON.generate(key) << ":"
          case key
          when "threads" then write_rows(text, rows, live, labels, at, loops)
          when "exited_threads" then Native.snapshot_rows_json(text, rows, live, 1, labels, at, loops)
          else text << JSON.generate(value)
          end
        end
        text << "}}\n"
        @size = text.bytesize
        text
      end

      private

      def write_rows(text, rows, count, labels, at, loops)
        text << "["
        0.step(count - 1, ROWS_PER_TURN) do |first|
          Thread.pass if first.positive?
          Native.snapshot_rows_json(text, rows, first, [ROWS_PER_TURN, count - first].min, labels, at, loops)
        end
        text << "]"
      end

      # { row index => "Class#method (file:line)" } for the rows Snapshot.located_rows picks.
      def code_locations(threads, states, busy_ns)
        cwd = "#{Dir.pwd}/"
        Snapshot.located_rows(states.map { |state| Metrics::Snapshot::STATES[state] }, busy_ns).to_h do |index|
          [index, threads[index] && Snapshot.code_location(threads[index], cwd)]
        end.compact
      end

      # Each live row's label as Snapshot.from_metrics gives it: Metrics::Snapshot's label, told
      # apart from its namesakes as Metrics::Snapshot.distinct_labels does, made printable. A
      # thread's are kept while its name is the same String, and the whole list while the threads
      # and their names are those of the last answer (no object per thread per answer).
      def labels_of(threads, rows)
        cwd = Vocabulary.working_directory
        # an unnamed thread's label has its creation site, relative to it
        @labels, @last_threads, @cwd = {}.compare_by_identity, nil, cwd unless cwd == @cwd
        same = @last_threads&.size == threads.size
        kept = Array.new(threads.size) do |index|
          Thread.pass if index.positive? && (index % ROWS_PER_TURN).zero?
          thread = threads[index]
          # A thread that exited since the last answer: its row has the name it had (a String).
          unless thread.is_a?(Thread)
            same = false
            next Label.new(nil, Metrics::Snapshot.thread_label(thread, serial(rows, index), cwd))
          end
          name = thread.name
          label = @labels[thread]
          unless label && label.name.equal?(name)
            label = @labels[thread] = Label.new(name, Metrics::Snapshot.thread_label(thread, serial(rows, index), cwd))
            same = false
          end
          same &&= @last_threads[index].equal?(thread)
          label
        end
        return @last_labels if same

        @labels = {}.compare_by_identity # threads gone since the last answer are let go
        threads.each_with_index { |thread, index| @labels[thread] = kept[index] if thread.is_a?(Thread) }
        counts = kept.map(&:raw).tally
        @last_threads = threads
        @last_labels = Array.new(kept.size) do |index|
          label = kept[index]
          counts[label.raw] > 1 ? label.namesake(serial(rows, index)) : label.printable
        end.freeze
      end

      # A thread's label: +raw+ as Metrics::Snapshot.thread_label makes it for the thread's +name+,
      # and printable, alone and among namesakes (as "name #serial"), each made once.
      Label = Struct.new(:name, :raw, :printable_text, :namesake_text) do
        def initialize(name, raw) = super(name, raw.frozen? ? raw : raw.dup.freeze)
        def printable = self.printable_text ||= Printable.text(raw)
        def namesake(serial) = self.namesake_text ||= Printable.text(Vocabulary.thread_label(raw, serial, namesake: true))
      end

      def serial(rows, index) = rows.unpack1("Q<", offset: (index * Metrics::Snapshot::ROW_FIELDS + Metrics::Snapshot::SERIAL) * 8)
    end
  end
end
