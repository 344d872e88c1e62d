# frozen_string_literal: true

require_relative "../support/units"
require_relative "../support/vocabulary"

module GVLScope
  module Formats
    # The per-thread table (Analysis::ThreadStats rows), most waiting first: part of the report
    # text, the HTML report and `gvlscope summary`.
    module ThreadTable
      module_function

      # Labels up to this wide are shown whole ("thread 12 (puma-8.0.2/lib/puma/thread_pool.rb:105)");
      # longer are cut in the middle (Vocabulary.fit).
      MAX_LABEL = 72

      # What the "off CPU" column means, under the table of a trace that sampled CPU time.
      OFF_CPU = "off CPU: of run + gc, the time the OS kept the thread off a CPU while it held the GVL " \
                "(measured between CPU samples, every 100 ms; an overloaded machine, a stopped process)"

      def lines(rows)
        width = (rows.map { |row| name(row).size } << 24).max.clamp(24, MAX_LABEL)
        off_cpu = off_cpu?(rows)
        lines = [format("%-#{width}s %10s %10s %10s %8s%s %12s %6s %6s  %s", "thread", "run", "wait", "idle", "gc",
                        off_cpu ? format(" %10s", "off CPU") : "", "longest wait", "holds", "waits", "released by")]
        rows.sort_by { |row| -row.wait_ns }.each do |row|
          released = row.released_by.map { |cause, count| "#{cause} #{count}" }.join(", ")
          lines << format("%-#{width}s %10s %10s %10s %8s%s %12s %6d %6d  %s", Vocabulary.fit(name(row), width), Units.ms(row.run_ns),
                          Units.ms(row.wait_ns), Units.ms(row.idle_ns), Units.ms(row.gc_ns),
                          off_cpu ? format(" %10s", Units.ms(row.held_off_cpu_ns.to_i)) : "",
                          Units.ms(row.longest_wait_ns), row.holds, row.waits, released)
        end
        lines
      end

      # What each release cause in the table's "released by" means (Vocabulary::RELEASE_CAUSES),
      # the ones the rows show and their name does not say, and the "off CPU" column: lines to put
      # under the table.
      def legend(rows)
        causes = rows.flat_map { |row| row.released_by.keys }.uniq
        causes = (Vocabulary::RELEASE_CAUSES.keys & causes.map(&:to_sym)).reject { |cause| Vocabulary::RELEASE_CAUSES[cause] == cause.to_s }
        lines = []
        lines.push("", "released by:", *causes.map { |cause| format("  %-10s %s", cause, Vocabulary::RELEASE_CAUSES[cause]) }) unless causes.empty?
        lines.push("", OFF_CPU) if off_cpu?(rows)
        lines
      end

      # The column shows in a trace that sampled CPU time (ThreadStats::Row#held_off_cpu_ns not nil).
      def off_cpu?(rows) = rows.any? { |row| !row.held_off_cpu_ns.nil? }

      # A named thread keeps its name and shows where it was created (Vocabulary.thread_display_name).
      def name(row) = Vocabulary.thread_display_name(row.label, row.created_at)
    end
  end
end
