# frozen_string_literal: true

require_relative "format"
require_relative "../support/units"
require_relative "../analysis/diff"

module GVLScope
  module Formats
    # An Analysis::Diff as text: `gvlscope diff A B`. The verdict first, then the process, its
    # threads, routes and jobs (A → B and the change of each measure), then the findings that are
    # new, gone or changed.
    class DiffText < Format
      def write(io)
        diff = @subject
        io << "A: #{side_line(diff.a)}\nB: #{side_line(diff.b)}\n"
        io << "#{diff.verdict? ? 'Verdict' : 'No verdict'}: #{diff.verdict}\n"
        io << "\nprocess\n" << table([diff.process], "")
        unless diff.threads.empty?
          io << "\nthreads (matched by name#{' and creation site' if diff.kind == 'trace'})\n" << table(diff.threads, "thread")
        end
        [["routes", diff.routes], ["jobs", diff.jobs]].each do |title, items|
          io << "\n#{title}\n" << table(items, title.chomp("s")) unless items.empty?
        end
        io << "\n" << findings(diff)
        notes = not_enough(diff)
        io << "\n" << notes unless notes.empty?
        io
      end

      private

      def side_line(side)
        "#{side.path} (#{side.kind}, #{Units.seconds(side.wall_ns)}#{", #{Analysis::Diff.count(side.waits)} GVL waits" if side.waits})"
      end

      def table(items, heading)
        names = items.map(&:name)
        width = [names.map(&:length).max || 0, heading.length, 7].max
        # A measure no input of this kind has (a snapshot's per-thread p99) is no column.
        columns = items.first.measures.map(&:name).select do |name|
          items.any? { |item| item.measure(name).then { |m| !m.a.nil? || !m.b.nil? } }
        end
        cells = items.map { |item| columns.map { |name| cell(item.measure(name), item.status) } }
        widths = columns.each_index.map { |i| [TITLES.fetch(columns[i]).length, *cells.map { |row| row[i].length }].max }
        line = ->(first, row) { (format("  %-#{width}s", first) + row.each_with_index.map { |text, i| "  #{text.ljust(widths[i])}" }.join).rstrip }
        header = line.(heading, columns.map { |name| TITLES.fetch(name) })
        lines = items.zip(cells).map { |item, row| line.(item.name, row) }
        ([header] + lines).join("\n") + "\n"
      end

      TITLES = { wait_per_s: "GVL wait per s, A → B", held: "GVL held, A → B", p99_wait: "p99 wait, A → B",
                 wait_per_request: "wait per request, A → B", requests: "count, A → B" }.freeze

      def cell(measure, status)
        value = ->(v) { v.nil? ? (status == "both" ? "-" : status == "new" ? "(new)" : "(gone)") : shown(measure.name, v) }
        text = "#{value.(measure.a)} → #{value.(measure.b)}"
        change = case measure.change
                 when :rose, :fell
                   measure.name == :held ? format("%s %.0f pt", measure.change, 100 * measure.ratio.abs) : "#{measure.change} #{Analysis::Diff.percent_change(measure.ratio)}"
                 when :same then "same"
                 when :not_enough_data then "n/a*"
                 end
        change ? "#{text} #{change}" : text
      end

      def shown(name, value)
        case name
        when :wait_per_s then Analysis::Diff.ms_per_s(value)
        when :held then format("%.1f%%", 100 * value)
        when :p99_wait then value < 1000 ? "≤#{value} ns" : "≤#{Units.ms_or_us(value)}"
        when :wait_per_request then Units.ms_or_us(value.round)
        else Analysis::Diff.count(value)
        end
      end

      def findings(diff)
        found = diff.findings
        lines = []
        found["gone"].each { |f| lines << "  gone:    #{finding_line(f)}" }
        found["new"].each { |f| lines << "  new:     #{finding_line(f)}" }
        found["changed"].each do |x, y|
          per_s = ->(f, side) { "#{Analysis::Diff.ms_per_s(f.explains_wait_ns * 1e9 / side.wall_ns)}/s" }
          lines << "  changed: #{finding_line(y)} (explains #{per_s.(x, diff.a)} → #{per_s.(y, diff.b)} of GVL wait)"
        end
        found["same"].each { |_, y| lines << "  kept:    #{finding_line(y)}" }
        lines << "  none in either" if lines.empty?
        "findings\n#{lines.join("\n")}\n"
      end

      def finding_line(finding)
        wait = finding.explains_wait_ns ? " [#{Units.ms_rounded(finding.explains_wait_ns)}]" : ""
        "#{finding.kind} #{finding.about.map { |t| "'#{t}'" }.join(', ')}#{wait}"
      end

      # "* n/a: ..." for each measure that had too little data, once per reason.
      def not_enough(diff)
        items = [diff.process, *diff.threads, *diff.series]
        reasons = items.flat_map do |item|
          item.measures.select { |m| m.change == :not_enough_data }.map { |m| "#{item.name}: #{TITLES.fetch(m.name).sub(', A → B', '')}: #{m.why}" }
        end
        return "" if reasons.empty?

        "* not enough data (docs/diff.md, \"The rules\"):\n#{reasons.first(12).map { |r| "  #{r}" }.join("\n")}" \
          "#{"\n  ... and #{reasons.size - 12} more" if reasons.size > 12}\n"
      end
    end
  end
end
