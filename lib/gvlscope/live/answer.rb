# frozen_string_literal: true

require "json"
require_relative "../native"
require_relative "../metrics"
require_relative "../printable"
require_relative "../vocabulary"
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
        @labels = {}.compare_by_identity # Thread => [its name when labelled, its label]
        @cwd = nil
      end

      # +stacks+: the rows of up to Snapshot::CODE_LOCATIONS_MAX threads say where their code is.
      # +breakdown+: GVLScope::Breakdown's series of the same moment.
      def json(pid:, trace_path:, timeslice_ns:, stacks:, breakdown:)
        now_ns, epoch_ns, waiting, threads, rows, histograms = Native.metrics_snapshot
        totals, held_by_ractor, states, busy_ns = Native.snapshot_rows_summary(rows)
        live = threads.size - 1 # the last row: the threads that exited earlier, together
        # Every thread is stopped where it runs or waits while this thread holds the GVL: the code
        # locations are read before the first hand-back, at the metrics' moment.
        at = stacks ? code_locations(threads, states, busy_ns) : {}
        metrics = Metrics::Snapshot.from_native([now_ns, epoch_ns, waiting, [], "", histograms], totals: totals)
        head = Snapshot.from_metrics(metrics, pid: pid, trace_path: trace_path, timeslice_ns: timeslice_ns,
                                              breakdown: breakdown).to_h
        head["held_ratio_by_ractor"] = held_by_ractor.to_h do |ractor, held|
          [ractor.to_s, metrics.wall_ns.positive? ? held.fdiv(metrics.wall_ns) : 0.0]
        end
        labels = labels_of(threads.first(live), rows)
        text = +'{"snapshot":{'
        head.each_with_index do |(key, value), index|
          text << "," unless index.zero?
          text << JSON.generate(key) << ":"
          case key
          when "threads" then write_rows(text, rows, live, labels, at)
          when "exited_threads" then Native.snapshot_row_json(text, rows, live, EXITED_LABEL, nil)
          else text << JSON.generate(value)
          end
        end
        text << "}}\n"
      end

      private

      def write_rows(text, rows, count, labels, at)
        text << "["
        count.times do |index|
          Thread.pass if index.positive? && (index % ROWS_PER_TURN).zero?
          text << "," if index.positive?
          Native.snapshot_row_json(text, rows, index, labels[index], at[index])
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
      # thread's are kept while its name is the same String (no object per thread per answer).
      def labels_of(threads, rows)
        cwd = Vocabulary.working_directory
        @labels.clear unless cwd == @cwd # an unnamed thread's label has its creation site, relative to it
        @cwd = cwd
        seen = {}.compare_by_identity
        kept = Array.new(threads.size) do |index|
          Thread.pass if index.positive? && (index % ROWS_PER_TURN).zero?
          thread = threads[index]
          # A thread that exited since the last answer: its row has the name it had (a String).
          next Label.new(nil, Metrics::Snapshot.thread_label(thread, serial(rows, index), cwd)) unless thread.is_a?(Thread)

          name = thread.name
          label = @labels[thread]
          label = Label.new(name, Metrics::Snapshot.thread_label(thread, serial(rows, index), cwd)) unless label && label.name.equal?(name)
          seen[thread] = label
        end
        @labels = seen # threads gone since the last answer are let go
        counts = kept.map(&:raw).tally
        Array.new(kept.size) do |index|
          label = kept[index]
          counts[label.raw] > 1 ? label.namesake(serial(rows, index)) : label.printable
        end
      end

      # A thread's label: +raw+ as Metrics::Snapshot.thread_label makes it for the thread's +name+,
      # and printable, alone and among namesakes (as "name #serial"), each made once.
      Label = Struct.new(:name, :raw, :printable, :namesake_printable) do
        def initialize(name, raw) = super(name, raw.frozen? ? raw : raw.dup.freeze)
        def printable = self[:printable] ||= Printable.text(raw)
        def namesake(serial) = self[:namesake_printable] ||= Printable.text(Vocabulary.thread_label(raw, serial, namesake: true))
      end

      def serial(rows, index) = rows.unpack1("Q<", offset: index * Metrics::Snapshot::ROW_FIELDS * 8)
    end
  end
end
