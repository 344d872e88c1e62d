# frozen_string_literal: true

require_relative "../model/scan"

module GVLScope
  module Analysis
    # Who held the GVL while each thread waited for it: each wait split among the holds (running
    # or gc intervals of the other threads of its Ractor) it overlapped, as the engine summed it
    # (ext/gvlscope_engine/pass.c).
    class Blame
      HAND_OFF = :hand_off # wait time during which nobody held the GVL (the hand-over itself)

      # waiter serial -> { holder serial (or HAND_OFF) -> ns }, for all waits and for the waits
      # that follow a blocking call (:idle then :wait: the convoy's waits).
      attr_reader :all_waits, :after_blocking

      # waiter serial -> ns of its waits during which another thread of its Ractor held the GVL to
      # collect garbage (a :gc interval): the waiting GC caused.
      attr_reader :during_gc

      # +timeline+: a Model::Scan (the engine summed the overlaps as waits closed; the hashes are
      # filled in the order a sweep over the waits by start fills them).
      def initialize(timeline)
        @all_waits = Hash.new { |hash, serial| hash[serial] = Hash.new(0) }
        @after_blocking = Hash.new { |hash, serial| hash[serial] = Hash.new(0) }
        @during_gc = Hash.new(0)
        from_scan(timeline)
      end

      # Total time other threads waited for the GVL while +holder+ held it.
      def waited_on(holder)
        @all_waits.sum { |waiter, holders| waiter == holder ? 0 : holders[holder] }
      end

      # { waiter serial => ns } of the waits +holder+ caused.
      def victims_of(holder)
        @all_waits.filter_map { |waiter, holders| [waiter, holders[holder]] if waiter != holder && holders[holder].positive? }
                  .to_h
      end

      private

      # The sweep visits Ractors in order and each Ractor's waits by start: a waiter joins a hash at
      # its first wait (its first wait after a blocking call, its first wait during a GC), and
      # within a waiter's hash each holder at its first overlap (the engine numbers them).
      def from_scan(scan)
        ractor_rank = scan.ractors.keys.each_with_index.to_h
        appearance = scan.threads.keys.each_with_index.to_h
        rows = scan.thread_rows.values # Engine::ThreadRows
        first = lambda do |field|
          rows.select(&field)
              .sort_by { |row| [ractor_rank.fetch(scan.threads[row.serial].ractor_id, 0), row[field], appearance[row.serial]] }
        end
        first.call(:first_wait).each { |row| @all_waits[row.serial] }
        first.call(:first_after_blocking).each { |row| @after_blocking[row.serial] }
        first.call(:first_gc).each { |row| @during_gc[row.serial] = row.during_gc_ns }
        pairs = scan.blame_rows # Engine::BlameRows
        pairs.select(&:all_ns).sort_by(&:all_seq).each do |pair|
          @all_waits[pair.waiter][pair.holder || HAND_OFF] += pair.all_ns
        end
        pairs.select(&:after_blocking_ns).sort_by(&:after_blocking_seq).each do |pair|
          @after_blocking[pair.waiter][pair.holder || HAND_OFF] += pair.after_blocking_ns
        end
      end
    end
  end
end
