# frozen_string_literal: true

require_relative "format"
require_relative "histogram_text"
require_relative "report_text"
require_relative "thread_table"
require_relative "../support/printable"
require_relative "../support/units"
require_relative "../support/vocabulary"

module GVLScope
  module Formats
    # An Analysis::Report as GitHub-flavoured Markdown: `gvlscope report --format markdown`, to
    # paste into a pull request or an issue. What the text report says (ReportText), laid out for
    # a Markdown page: the findings as a numbered list, the threads and the code locations as
    # tables, the histograms folded away in a <details>.
    #
    # Thread names, file paths and method labels come from the traced program, so they are shown
    # verbatim in code spans, where no Markdown or HTML in them takes effect (a code span's fence is
    # longer than any run of backticks in it; in a table, pipes are escaped, as GFM asks even in a
    # code span). Everything else is text with Markdown's punctuation backslash-escaped and &, < and
    # > written as entities. Control characters are shown as escapes (Printable), so a newline in a
    # name cannot end a table row.
    class ReportMarkdown < Format
      SHOWN_FINDINGS = 5 # as the text report; --json lists them all

      def write(io)
        @report = @subject
        blocks = [header, findings, threads, code_locations, histograms].compact
        io << blocks.join("\n\n") << "\n"
      end

      private

      def header
        report = @report
        file = report.file
        notes, held, per_ractor = ReportText.header_facts(report)
        first = format("%.3f s, %d events, %d threads, timeslice %d ms%s.", report.duration_ns / 1e9, file.size,
                       report.all_rows.size, report.timeslice_ns / 1_000_000, notes)
        second = format("GVL held **%.1f%%** of the time%s; threads waited **%s** for it in all.", 100 * held,
                        text(per_ractor), Units.ms(report.wait_ns))
        overload = ReportText.overload_note(file)
        "## GVL report: #{code(file.path)}\n\n#{text(first)} #{second}#{" #{overload}." if overload}"
      end

      def findings
        list = @report.findings
        return ReportText.no_findings if list.empty?

        lines = ["### Findings (#{list.size}), by #{Analysis::Finding.ranked_by(list)} each explains", ""]
        list.first(SHOWN_FINDINGS).each_with_index do |finding, index|
          lines << "#{index + 1}. **#{text(finding.explains)}**: #{prose(finding.title, finding)}"
          lines << "   - fix: #{prose(finding.fix, finding)}"
        end
        hidden = list.size - SHOWN_FINDINGS
        if hidden.positive?
          lines << "" << "#{hidden} more finding#{'s' if hidden > 1}: #{code('gvlscope report --json')} lists them all."
        end
        lines.join("\n")
      end

      COLUMNS = ["thread", "run", "wait", "idle", "gc", "longest wait", "holds", "waits", "released by"].freeze

      def threads
        rows = @report.rows.sort_by { |row| -row.wait_ns }
        off_cpu = ThreadTable.off_cpu?(rows) # the column of a trace that sampled CPU time
        columns = off_cpu ? COLUMNS.dup.insert(5, "off CPU") : COLUMNS
        lines = ["### Threads", "", "| #{columns.join(' | ')} |", "|:---|#{'---:|' * (columns.size - 2)}:---|"]
        rows.each do |row|
          released = row.released_by.map { |cause, count| "#{cause} #{count}" }.join(", ")
          cells = [code(Vocabulary.thread_display_name(row.label, row.created_at), table: true), Units.ms(row.run_ns),
                   Units.ms(row.wait_ns), Units.ms(row.idle_ns), Units.ms(row.gc_ns),
                   *(off_cpu ? [Units.ms(row.held_off_cpu_ns.to_i)] : []), Units.ms(row.longest_wait_ns),
                   row.holds, row.waits, text(released)]
          lines << "| #{cells.join(' | ')} |"
        end
        legend = legend(rows)
        lines.push("", legend) if legend
        lines.push("", text(ThreadTable::OFF_CPU.sub("off CPU:", "Off CPU:"))) if off_cpu
        lines.join("\n")
      end

      # What the release causes the table shows mean, as ThreadTable.legend.
      def legend(rows)
        causes = rows.flat_map { |row| row.released_by.keys }.uniq.map(&:to_sym)
        causes = (Vocabulary::RELEASE_CAUSES.keys & causes).reject { |cause| Vocabulary::RELEASE_CAUSES[cause] == cause.to_s }
        return nil if causes.empty?

        (["Released by:"] + causes.map { |cause| "- #{text(cause.to_s)}: #{text(Vocabulary::RELEASE_CAUSES[cause])}" }).join("\n")
      end

      def code_locations
        code = @report.code_locations
        title = "### Where the waiting came from"
        return "#{title}\n\nStacks: not recorded (--no-stacks, an older trace, or a gvl-tracing import)." unless code.stacks?

        timeline = @report.timeline
        counts = timeline.file.stack_counts || {}
        notes = []
        notes << "#{counts[:dropped]} stacks dropped (tables full)" if counts[:dropped].to_i.positive?
        notes << "#{counts[:unreadable]} releases whose frames could not be read" if counts[:unreadable].to_i.positive?
        notes << "holder samples: main Ractor only" if timeline.ractors.size > 1
        lines = [notes.empty? ? title : "#{title} (#{text(notes.join('; '))})", ""]
        holders = code.holder_profile.first(10)
        lines << "Holders: the code that held the GVL while threads waited (#{timeline.samples.size} samples, weighted by waiters)."
        if holders.empty?
          lines << "" << "No sample: no thread waited for a timer tick (10 ms)."
        else
          lines.push("", "| share | code | at |", "|---:|:---|:---|")
          holders.each { |row| lines << "| #{format('%.1f%%', 100 * row.share)} | #{frame_cells(row.frame)} |" }
        end
        sites = code.release_sites
        lines << "" << "Release sites: the calls that gave the GVL up, by the wait for it that followed " \
                       "(#{sites.sum(&:count)} releases recorded while another thread waited or in an event loop's turn)."
        if sites.empty?
          lines << "" << "None recorded."
        else
          lines.push("", "| wait after | calls | cause | call | at | threads |", "|---:|---:|:---|:---|:---|:---|")
          sites.first(10).each do |row|
            names = row.threads.first(3).map { |label| code(label, table: true) }.join(", ")
            lines << "| #{Units.ms(row.weight)} | #{row.count} | #{text(row.cause.to_s)} | #{frame_cells(row.frame)} | #{names} |"
          end
        end
        lines.join("\n")
      end

      # A frame as two cells: its label, and its file and line (none for a C method alone).
      def frame_cells(frame)
        at = frame.path ? code("#{frame.path}:#{frame.line}", table: true) : ""
        "#{code(frame.label, table: true)} | #{at}"
      end

      # The three histograms as the text report draws them, in a fenced block (no Markdown inside:
      # only numbers and units), folded away.
      def histograms
        histograms = @report.histograms
        sections = HistogramText.report_sections(histograms[:hold_ns], histograms[:wait_ns], histograms[:waiters_at_acquire])
        body = sections.map { |lines| lines.join("\n") }.join("\n\n")
        "<details><summary>Histograms: GVL hold time, wait for the GVL, threads still waiting at acquire</summary>\n\n" \
          "```text\n#{body}\n```\n\n</details>"
      end

      # A finding's sentence: its quoted thread labels ('name') and code labels (`Class#method`)
      # as code spans, the rest as text. Labels are found by their exact quoted form, the first in
      # the sentence (the longest at one place), so that one holding a quote or a backtick cannot
      # unbalance what follows. Plain string search: a label need not be valid UTF-8.
      def prose(sentence, finding)
        rest = utf8(sentence)
        quoted = known_quoted(finding).select { |q| rest.include?(q) }
        pieces = []
        loop do
          found = quoted.filter_map { |q| (at = rest.index(q)) && [at, -q.size, q] }.min
          break unless found

          at, _, q = found
          pieces << text(rest[0, at]) << code(q[1..-2]) # 'label' or `label`: the label without its quotes
          rest = rest[(at + q.size)..]
        end
        pieces << text(rest)
        pieces.join
      end

      # 'label' of every thread, `label` of every code frame the report or the finding names.
      def known_quoted(finding)
        @thread_quotes ||= @report.all_rows.map { |row| utf8("'#{row.label}'") }
        quoted = @thread_quotes + finding.threads.to_a.map { |label| utf8("'#{label}'") }
        quoted.concat(code_labels(finding).map { |label| utf8("`#{label}`") })
        quoted.uniq
      end

      def code_labels(finding)
        evidence = finding.evidence.is_a?(Hash) ? finding.evidence : {}
        # A finding's frames (its holders', its release sites), or the one frame of its code (a loop stall's).
        labels = %i[holder_frames release_sites code].flat_map do |key|
          frames = evidence[key].is_a?(Hash) ? [evidence[key]] : Array(evidence[key])
          frames.filter_map { |frame| frame.is_a?(Hash) ? (frame[:label] || frame["label"]) : nil }
        end
        code = @report.code_locations
        if code.stacks?
          labels.concat(code.holder_profile.map { |row| row.frame.label })
          labels.concat(code.release_sites.map { |row| row.frame.label })
        end
        labels.compact.map(&:to_s).reject(&:empty?).uniq
      end

      # +string+ as UTF-8, invalid bytes as U+FFFD (as Printable shows them).
      def utf8(string)
        string = string.to_s
        string = string.dup.force_encoding(Encoding::UTF_8) unless string.encoding == Encoding::UTF_8
        string.valid_encoding? ? string : string.scrub
      end

      # Text with the characters Markdown or HTML would read escaped: backslash escapes for
      # CommonMark's inline punctuation (the pipe too, everywhere: the same text reads the same in a
      # table cell; an underscore within a word cannot emphasise and stays: RUBY_THREAD_TIMESLICE),
      # entities for &, < and >.
      TEXT_ESCAPES = { "&" => "&amp;", "<" => "&lt;", ">" => "&gt;" }.freeze
      ESCAPED = /[\\`*\[\]|~&<>]|(?<![[:alnum:]])_|_(?![[:alnum:]])/
      def text(string)
        Printable.text(string).gsub(ESCAPED) { |char| TEXT_ESCAPES[char] || "\\#{char}" }
      end

      # +string+ verbatim in a code span: a fence of one backtick more than its longest run of them,
      # padded with a space where it starts or ends with a backtick or a space (CommonMark strips
      # one). In a table a pipe is escaped as \| (GFM splits cells before it reads code spans).
      def code(string, table: false)
        content = Printable.text(string)
        return "` `" if content.empty?

        fence = "`" * ((content.scan(/`+/).map(&:size).max || 0) + 1)
        content = " #{content} " if content.start_with?("`", " ") || content.end_with?("`", " ")
        content = content.gsub("|", "\\|") if table
        "#{fence}#{content}#{fence}"
      end
    end
  end
end
