# frozen_string_literal: true

require_relative "../support/errors"
require_relative "../support/units"
require_relative "diff"

module GVLScope
  module Analysis
    # The inputs of `gvlscope diff` made into Diff::Side: a trace's Analysis::Report, a live
    # snapshot file (what `gvlscope top --once --json` prints: one snapshot, or two to take the
    # interval between), a /metrics scrape saved to a file (the Puma plugin's Prometheus text).
    module DiffInputs
      module_function

      # A Diff::Side of a trace's Report (read through Model::Scan by the CLI).
      def from_report(report, path)
        scan = report.timeline
        rows = report.all_rows
        histograms = report.histograms[:wait_ns]
        groups = rows.group_by { |row| [base_name(row.label), row.created_at] }.map do |(name, created_at), same|
          thread_histogram = scan.respond_to?(:histograms) ? scan.histograms(same.map(&:serial)).wait_ns : nil
          Diff::Group.new(name: name, created_at: created_at, threads: same.size, wait_ns: same.sum(&:wait_ns),
                          held_ns: busiest_gvl_ns(same, &:held_ns), waits: same.sum(&:waits),
                          wait_histogram: thread_histogram && Array(thread_histogram))
        end
        Diff::Side.new(
          kind: "trace", path: path, wall_ns: report.duration_ns, wait_ns: rows.sum(&:wait_ns),
          held_ns: busiest_gvl_ns(rows, &:held_ns), waits: rows.sum(&:waits), wait_histogram: Array(histograms),
          threads: groups, series: [],
          findings: report.findings.map do |finding|
            Diff::FindingRow.new(kind: finding.kind.to_s, about: finding.about.map { |label| base_name(label) }.uniq,
                                 threads: finding.threads.map { |label| base_name(label) }.uniq,
                                 title: finding.title, explains_wait_ns: finding.explains_wait_ns)
          end
        )
      end

      # A Diff::Side of a live snapshot (a snapshot file's one snapshot, or the interval between its
      # first and last: Live::Snapshot.read_file) or of a saved /metrics page (cumulative since each
      # worker started measuring: Live::Scrape.read_file, with its +breakdown+). The CLI reads the
      # file: the live stage reads analysis, never the other way (script/check-ruby-layers).
      def from_snapshot(snapshot, path, kind:, breakdown: nil)
        wall = kind == "scrape" ? snapshot.wall_ns : snapshot.interval_ns
        groups = snapshot.threads.group_by { |row| base_name(row.label || "thread") }.map do |name, same|
          Diff::Group.new(name: name, created_at: nil, threads: same.size, wait_ns: same.sum(&:wait_ns),
                          held_ns: busiest_gvl_ns(same, &:held_ns), waits: same.sum(&:waits), wait_histogram: nil)
        end
        series = (breakdown || snapshot.breakdown).map do |entry|
          Diff::Series.new(kind: entry[:kind], label: entry[:label], tags: entry[:tags].to_h, count: entry[:count],
                           wait_ns: entry[:wait_ns], duration_ns: entry[:duration_ns], wait_histogram: entry[:wait_buckets])
        end
        Diff::Side.new(
          kind: kind, path: path, wall_ns: wall, wait_ns: snapshot.wait_ns,
          held_ns: snapshot.threads.empty? ? snapshot.held_ns : busiest_gvl_ns(snapshot.threads, &:held_ns),
          waits: snapshot.wait_histogram.sum, wait_histogram: snapshot.wait_histogram.dup, threads: groups, series: series,
          findings: snapshot.findings.map do |finding|
            threads = Array(finding["threads"]).map { |label| base_name(label.to_s) }.uniq
            # A live finding's first thread is its subject (the hog, the convoy's waiter), but
            # contention's: every waiting thread, and a convoy's: every thread but its holder.
            about = if finding["kind"].to_s == "contention" then threads
                    elsif finding["holder"] then threads - [base_name(finding["holder"].to_s)]
                    else threads.first(1)
                    end
            Diff::FindingRow.new(kind: finding["kind"].to_s, about: about, threads: threads, title: finding["title"].to_s,
                                 explains_wait_ns: nil)
          end
        )
      end

      # The held time of the busiest Ractor's GVL (the block gives a row's held ns): the held share
      # compared is a GVL's, as the report's headline (all Ractors' together could pass 100 %).
      def busiest_gvl_ns(rows, &held) = rows.group_by(&:ractor_id).values.map { |same| same.sum(&held) }.max || 0

      # A thread's label without what tells namesakes apart: "echo #4" is "echo", "thread 7
      # (app.rb:3)" is "thread" (its creation site is kept beside it).
      def base_name(label)
        label.sub(/ #\d+\z/, "").sub(/\Athread \d+(?: \(.*\))?\z/, "thread")
      end
    end
  end
end
