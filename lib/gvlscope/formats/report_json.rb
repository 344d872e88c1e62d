# frozen_string_literal: true

require "json"
require_relative "format"
require_relative "../support/units"

module GVLScope
  module Formats
    # An Analysis::Report as JSON: `gvlscope report --json`. The schema is in docs/report.md.
    class ReportJSON < Format
      # 2: release causes io/sleep/lock/join/pass, "stacks"; 3: one finding per cause (about, threads),
      # ranked by explains_wait_ns (wait_share of all GVL wait), kinds hand_off and gc
      SCHEMA_VERSION = 3

      def write(io)
        io << JSON.pretty_generate(to_h) << "\n"
      end

      # The report as plain data.
      def to_h
        report = @subject
        file = report.file
        {
          gvlscope_report: SCHEMA_VERSION,
          file: file.path,
          pid: file.pid,
          duration_ns: report.duration_ns,
          timeslice_ns: report.timeslice_ns,
          events: file.size,
          dropped_events: file.dropped,
          truncated: file.truncated?,
          wait_ns: report.wait_ns,
          ractors: report.held_ratio_by_ractor.map { |id, ratio| { id: id, held_ratio: ratio.round(6) } },
          threads: report.rows.map { |row| row_hash(row) },
          histograms: report.histograms.transform_values { |counts| histogram_hash(counts) },
          findings: report.findings.map(&:to_h),
          stacks: stacks_hash(report),
        }
      end

      private

      def row_hash(row)
        {
          serial: row.serial, name: row.label, ractor_id: row.ractor_id, run_ns: row.run_ns,
          wait_ns: row.wait_ns, idle_ns: row.idle_ns, gc_ns: row.gc_ns, holds: row.holds, waits: row.waits,
          longest_wait_ns: row.longest_wait_ns, released_by: row.released_by.transform_keys(&:to_s),
          created_at: row.created_at, held_off_cpu_ns: row.held_off_cpu_ns
        }.compact
      end

      # Code locations: nil-free keys so a reader tells "not recorded" from "nothing found".
      def stacks_hash(report)
        code = report.code_locations
        return { recorded: false } unless code.stacks?

        counts = report.file.stack_counts || {}
        { recorded: true, samples: report.timeline.samples.size, **counts,
          holders: code.holder_profile.first(50).map(&:to_h), release_sites: code.release_sites.first(50).map(&:to_h) }
      end

      def histogram_hash(counts)
        counts.each_index.select { |bucket| counts[bucket].positive? }.map do |bucket|
          { from: Log2.lower(bucket), to: Log2.upper(bucket), count: counts[bucket] }
        end
      end
    end
  end
end
