# frozen_string_literal: true

module GVLScope
  # The GVL's counters of one thread, one request, or a whole process, as one value: run_ns
  # (holding the GVL running Ruby, GC excluded), wait_ns (runnable, waiting for the GVL), idle_ns
  # (blocked: IO, sleep, locks), gc_ns (holding the GVL in GC), all in ns, and releases (how many
  # times it gave the GVL up). They add and subtract field by field.
  #
  #   interval = GVLScope::Counters.of(later) - GVLScope::Counters.of(earlier)
  #   interval.held_ns          # run_ns + gc_ns
  #   interval.wait_ratio       # share of its time spent waiting for the GVL
  Counters = Data.define(:run_ns, :wait_ns, :idle_ns, :gc_ns, :releases)

  class Counters
    TIMES = %i[run_ns wait_ns idle_ns gc_ns].freeze

    # What every record with the four times (a snapshot's thread row, a request's numbers, a
    # breakdown series, a snapshot) answers from them: the one place these sums are written.
    module Sums
      # Time the GVL was held: running Ruby or in GC.
      def held_ns = run_ns + gc_ns

      def total_ns = run_ns + wait_ns + idle_ns + gc_ns

      # Shares of +whole_ns+ (by default the record's own total time; a snapshot passes its wall time).
      def held_ratio(whole_ns = total_ns) = Counters.ratio(held_ns, whole_ns)
      def wait_ratio(whole_ns = total_ns) = Counters.ratio(wait_ns, whole_ns)
      def idle_ratio(whole_ns = total_ns) = Counters.ratio(idle_ns, whole_ns)

      # The record's numbers as a Counters value (releases 0 where the record counts none).
      def counters = Counters.of(self)
    end

    # A record counting its releases by cause (a thread's metrics: blocking, preempted, at exit).
    module Releases
      def releases = released_blocking + released_preempted + released_exit
    end

    include Sums

    ZERO = new(run_ns: 0, wait_ns: 0, idle_ns: 0, gc_ns: 0, releases: 0)

    # +record+'s counters: anything answering run_ns, wait_ns, idle_ns and gc_ns, and releases if it counts them.
    def self.of(record)
      new(run_ns: record.run_ns, wait_ns: record.wait_ns, idle_ns: record.idle_ns, gc_ns: record.gc_ns,
          releases: record.respond_to?(:releases) ? record.releases : 0)
    end

    # +part+ / +whole+, 0.0 when the whole is none (an empty interval).
    def self.ratio(part, whole) = whole.positive? ? part.fdiv(whole) : 0.0

    def +(other) = with(**members.to_h { |member| [member, public_send(member) + other.public_send(member)] })
    def -(other) = with(**members.to_h { |member| [member, public_send(member) - other.public_send(member)] })

    # The interval between two snapshots' thread rows (Metrics::Snapshot#-, Live::Snapshot#-): a row
    # subtracts its earlier self (same serial; +subtract+ makes the difference of two rows); rows of
    # the earlier snapshot missing now exited in between, and their counts moved into the exited
    # row, including what they had counted before the interval: that is taken back out of it.
    # Returns [rows, exited row]; the exited row is nil when either snapshot has none.
    def self.interval_rows(rows, exited, earlier_rows, earlier_exited, &subtract)
      earlier = earlier_rows.to_h { |row| [row.serial, row] }
      interval = rows.map { |row| (before = earlier.delete(row.serial)) ? subtract.(row, before) : row }
      exited_interval = exited && earlier_exited && earlier.values.reduce(subtract.(exited, earlier_exited), &subtract)
      [interval, exited_interval]
    end

    # +values+ (a row's fields by name) less +before+'s, for each counter but the maxima (a
    # longest_* keeps the later value). A counter a row was made without (nil) counts 0.
    def self.subtract(values, before, counters, maxima)
      counters.each { |counter| values[counter] = values[counter].to_i - before[counter].to_i unless maxima.include?(counter) }
      values
    end
  end
end
