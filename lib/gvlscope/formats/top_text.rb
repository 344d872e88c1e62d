# frozen_string_literal: true

require_relative "format"
require_relative "../support/units"
require_relative "../support/vocabulary"
require_relative "../live/rules"

module GVLScope
  module Formats
    # One frame of `gvlscope top`: the GVL of the last interval (a Live::Snapshot difference) as
    # lines of text. The interactive view draws these lines with curses; a pipe or --once gets
    # them as they are (no escape codes either way).
    class TopText < Format
      # snapshot: the interval (Live::Snapshot); target: what is watched ("pid 42 (ruby app.rb)");
      # sort: one of SORTS; paused; findings: [[seen_at "HH:MM:SS", finding Hash]] so far, oldest
      # first; keys: true to end with the keys line; note: a line about code locations, or nil;
      # width: the terminal's columns (nil: lines as long as they come, for a pipe).
      Frame = Struct.new(:snapshot, :target, :sort, :paused, :findings, :keys, :note, :clock, :width, keyword_init: true)

      SORTS = %w[wait run idle name].freeze
      BAR = 20          # characters of the held and waiting gauges
      LABEL = 22..32    # characters of the thread column: its longest label within these
      TOP = 3           # threads named in the top holders and top waiters lines
      FINDINGS = 6      # findings shown, newest last (hogs first kept: the cause others wait behind)
      CODE_MIN = 16     # below this many columns for CODE, the table leaves out RUN, WAIT and IDLE (ms)

      def write(out)
        frame = @subject
        @snapshot = frame.snapshot
        @width = frame.width
        lines = header(frame) + [""] + (@snapshot.threads.empty? && !@snapshot.workers.empty? ? workers : threads(frame))
        lines += ["", *findings(frame)]
        lines += ["", "keys: q quit · s sort (#{SORTS.join(' → ')}) · p pause"] if frame.keys
        out << lines.flat_map { |line| wrap(line) }.join("\n") << "\n"
      end

      # The thread rows in the order +sort+ asks for (gvlscope's own threads last).
      def self.sorted(rows, sort)
        key = case sort
              when "run" then ->(row) { -row.held_ns }
              when "idle" then ->(row) { -row.idle_ns }
              when "name" then ->(row) { row.label.to_s }
              else ->(row) { -row.wait_ns }
              end
        rows.sort_by { |row| [own?(row) ? 1 : 0, key.call(row), row.serial.to_i] }
      end

      def self.own?(row) = Live::Rules.own?(row)

      private

      def header(frame)
        s = @snapshot
        waiting_avg = s.wall_ns.positive? ? s.wait_ns.fdiv(s.wall_ns) : 0.0
        title = ["gvlscope top", frame.target, frame.clock, format("interval %.2f s", s.interval_ns / 1e9),
                 "sort: #{frame.sort}", (frame.paused ? "PAUSED" : nil)].compact.join(" · ")
        gauge_max = [s.threads.size - 1, s.waiting_threads, waiting_avg.ceil, 1].max
        [
          title,
          format("GVL held %5.1f%% %s   wait %s/s   waiting threads now %d, avg %.2f %s",
                 100 * s.busiest_held_ratio, bar(s.busiest_held_ratio), seconds(s.wait_ns_per_s), s.waiting_threads, waiting_avg,
                 bar(waiting_avg / gauge_max)),
          format("acquisitions %d · releases: %d blocking, %d preempted, %d exit%s", s.acquisitions,
                 s.releases[:blocking], s.releases[:preempted], s.releases[:exit],
                 s.processes > 1 ? " · #{s.processes} processes (held and wait per process)" : ""),
        ]
      end

      SHARES = ["%-*s %-5s %6s %6s %6s %5s", %w[THREAD STATE RUN% WAIT% IDLE% GC%]].freeze
      TIMES = [" %9s %9s %9s", %w[RUN WAIT IDLE]].freeze

      # The table fits the width: when CODE would get fewer than CODE_MIN columns the ms columns
      # go (the shares stay), and a label or code too long is cut in its middle (its file:line kept).
      def threads(frame)
        rows = self.class.sorted(@snapshot.threads, frame.sort)
        @label = rows.map { |row| row.label.to_s.size }.max.to_i.clamp(LABEL)
        columns = [SHARES, TIMES]
        columns = [SHARES] if @width && code_width(columns) < CODE_MIN
        row_format = "#{columns.map(&:first).join}  %s"
        table = [format(row_format, @label, *columns.flat_map(&:last), "CODE")]
        rows.each do |row|
          times = [Units.ms(row.run_ns), Units.ms(row.wait_ns), Units.ms(row.idle_ns)] if columns.size > 1
          code = @width ? Vocabulary.fit(where(row), [code_width(columns), 0].max) : where(row)
          table << format(row_format, @label, Vocabulary.fit(row.label.to_s, @label), row.state, share(row.run_ns),
                          share(row.wait_ns), share(row.idle_ns), share(row.gc_ns), *times, code).rstrip
        end
        table << "(no threads seen yet)" if rows.empty?
        table + loops(rows) + ["", holders, waiters, *frame.note]
      end

      LOOPS = ["%-*s %6s %8s %9s %9s", %w[EVENT\ LOOP BUSY% TURNS/S LONGEST LAG\ p99]].freeze

      # The threads that run an event loop, in the table's order, with their loop's interval: the
      # share of it the loop's turns kept the thread, turns per second, the longest turn and the
      # loop lag (Live::Snapshot::LoopRow#lag_ns). Nothing, not even the header, when no thread has a loop.
      def loops(rows)
        looped = rows.select(&:loop)
        return [] if looped.empty?

        interval = @snapshot.interval_ns
        lines = looped.map do |row|
          loop = row.loop
          format(LOOPS.first, @label, Vocabulary.fit(row.label.to_s, @label), share(loop.busy_ns),
                 format("%.1f", loop.turns_per_s(interval)), Units.ms_rounded(loop.longest_turn_ns),
                 Units.ms_rounded(loop.lag_ns))
        end
        ["", format(LOOPS.first, @label, *LOOPS.last), *lines]
      end

      # Columns left for CODE after +columns+ on a line of the frame's width (less one: curses
      # leaves the last column alone).
      def code_width(columns)
        @width - 1 - format(columns.map(&:first).join("") + "  ", @label, *columns.flat_map(&:last)).size
      end

      # +line+ as lines of at most the frame's width, cut between words, the next ones indented
      # under the first word's end (a finding after its time, a list after its name).
      def wrap(line)
        return [line] if @width.nil? || line.size < @width

        indent = " " * [line[/\A\s*\S+\s+/].to_s.size, @width / 3].min
        lines = [+""]
        line.split(/(?<= )/).each do |word|
          if !lines.last.strip.empty? && lines.last.size + word.rstrip.size >= @width
            lines.last.rstrip!
            lines << (indent + "")
          end
          lines.last << word
        end
        lines.map { |piece| piece.rstrip.size < @width ? piece.rstrip : Vocabulary.fit(piece.rstrip, @width - 1) }
      end

      def workers
        table = [format("%-8s %-8s %6s %10s %8s", "WORKER", "PID", "HELD%", "WAIT/S", "WAITING")]
        @snapshot.workers.each do |row|
          wait_per_s = row.wall_ns.positive? ? row.wait_ns * 1e9 / row.wall_ns : 0.0
          table << format("%-8s %-8s %5.1f%% %10s %8d", row.worker || "-", row.pid || "-", 100 * row.held_ratio,
                          seconds(wait_per_s), row.waiting_threads)
        end
        table + ["", "threads: a /metrics scrape has none; the live socket has them (gvlscope top PID)"]
      end

      def holders
        rows = app_threads.select { |row| row.held_ns.positive? }.max_by(TOP, &:held_ns)
        text = rows.map do |row|
          code = row.code && (row.code["holding"] || row.code["at"])
          "'#{row.label}' #{share(row.held_ns).strip}#{code ? " in #{code}" : ''}"
        end
        "top holders: #{text.empty? ? 'none' : text.join('; ')}"
      end

      def waiters
        rows = app_threads.select { |row| row.wait_ns.positive? }.max_by(TOP, &:wait_ns)
        text = rows.map do |row|
          site = row.code && row.code["released_at"]
          at = row.code && row.code["at"]
          place = site ? " after #{site}" : (at ? " at #{at}" : "")
          "'#{row.label}' #{Units.ms_rounded(row.wait_ns)} in #{row.waits} wait#{'s' unless row.waits == 1}#{place}"
        end
        "top waiters: #{text.empty? ? 'none' : text.join('; ')}"
      end

      # The program's threads: gvlscope's own (named "gvlscope ...") are in the table, not in the tops.
      def app_threads = @snapshot.threads.reject { |row| self.class.own?(row) }

      # Names the kinds the live rules look for (Live::Rules::KINDS).
      FINDINGS_HEADER = "findings (live rules #{Live::Rules::KINDS.map(&:title).join(', ')} on each interval; newest last):"

      def findings(frame)
        lines = [FINDINGS_HEADER]
        shown = shown_findings(frame.findings)
        lines << "  none so far" if shown.empty?
        shown.each { |seen_at, finding| lines << "  #{seen_at}  #{finding['title']}" }
        lines
      end

      # The last FINDINGS of +findings+ ([seen_at, Hash], oldest first), in their order; a hog
      # stays in them however many findings came after it (the newest FINDINGS hogs, if more).
      def shown_findings(findings)
        hogs, others = findings.partition { |_, finding| finding["kind"] == "hog" }
        kept = hogs.last(FINDINGS) + others.last([FINDINGS - hogs.size, 0].max)
        findings.select { |entry| kept.any? { |chosen| chosen.equal?(entry) } }
      end

      def share(ns)
        interval = @snapshot.interval_ns
        interval.positive? ? format("%.0f%%", 100.0 * ns / interval) : "-"
      end

      # From a trace, a thread that mostly waited: the call it released the GVL at; one that mostly
      # held it: its code. Otherwise where it was at the last refreshes (sampled).
      def where(row)
        return "" unless row.code

        first, second = row.wait_ns > row.held_ns ? %w[released_at holding] : %w[holding released_at]
        row.code[first] || row.code[second] || row.code["at"] || ""
      end

      def bar(ratio)
        filled = (ratio.clamp(0.0, 1.0) * BAR).round
        "[#{'#' * filled}#{'.' * (BAR - filled)}]"
      end

      def seconds(ns) = ns >= 1e9 ? format("%.2f s", ns / 1e9) : format("%.0f ms", ns / 1e6)
    end
  end
end
