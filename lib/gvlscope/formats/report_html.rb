# frozen_string_literal: true

require "json"
require "set"
require_relative "format"
require_relative "histogram_text"
require_relative "report_text"
require_relative "thread_table"
require_relative "../support/units"
require_relative "../support/vocabulary"
require_relative "../analysis/stack_profile"
require_relative "../analysis/overview"

module GVLScope
  module Formats
    # An Analysis::Report as one self-contained HTML file (no network): findings, per-thread table,
    # histograms and a zoomable timeline drawn on a canvas by report_html/viewer.js.
    #
    # The timeline has two resolutions, so the page stays under ~25 MB and opens in seconds for a
    # trace of any length (docs/report.md, "HTML"):
    # - the overview (Analysis::Overview): each thread's run, wait, idle and gc time in each of
    #   Budget#bins slices of the trace, what the viewer draws zoomed out;
    # - the intervals themselves, packed binary (base64), 3-4 bytes each: all of them for a trace
    #   of up to Budget#embed_all_intervals events; otherwise those in a window around each finding
    #   and one where the threads waited most (Budget#detail_intervals in all), which the viewer
    #   draws where the view meets them.
    # At most Budget#lanes threads get a lane of their own (those that ran and waited most, and
    # those a finding names); the others share one lane of their average. Under a shown thread
    # whose event loop gave its fibers turns (traces with turns, docs/fibers.md), a lane of the
    # turns (Model::Turn): all of them up to Budget#turns, else those that meet the intervals'
    # windows (the first Budget#turns).
    #
    # With stacks, "Where the waiting came from": an icicle graph of the wait-weighted holder
    # profile (all threads, and one per thread a finding names as the holder: clicking the
    # finding shows it) and the release-site table. The profiles are call trees aggregated here
    # and capped in nodes, so a long trace embeds kilobytes, not its samples.
    class ReportHTML < Format
      TEMPLATE = File.join(__dir__, "report_html", "template.html")
      VIEWER = File.join(__dir__, "report_html", "viewer.js")
      # One byte per interval: the colour the viewer gives it (the legend lists them in this order):
      # the states, with an idle thread's reason in place of :idle.
      CODES = (Vocabulary::STATES.keys - [:idle] + Vocabulary::IDLE_REASONS.keys).each_with_index.to_h.freeze
      IDLE_CODES = Vocabulary::IDLE_REASONS.keys.to_h { |reason| [reason, CODES.fetch(reason)] }
                                                 .merge(nil => CODES.fetch(:unknown)).freeze
      # Nodes of the whole profile's tree, and of each holder thread's: the icicle draws in
      # milliseconds and the page stays small whatever the trace's length.
      PROFILE_NODES = 2000
      THREAD_PROFILE_NODES = 500
      RELEASE_SITES = 10 # rows of the release-site table

      # What the page may hold. The defaults keep it under ~23 MB for any trace: an interval takes
      # 3-4 bytes (ReportHTML#lane), 11 at most, so a --window page's 1,000,000 take 15 MB at most
      # in base64; an overview lane 2,000 bins * 4 * 2 bytes, 21 KB in base64 (4.3 MB for 201
      # lanes); a turn 3-6 bytes (its fiber, gap and length), 15 at most, so 200,000 take 4 MB at most
      # in base64 (1 MB typically); the table's 1,000 rows about 150 KB; findings, stacks and the
      # viewer a few hundred KB.
      # embed_all_intervals: a trace of at most this many events has all its intervals on the page
      # detail_intervals:    otherwise, the intervals of all the windows around findings, together
      #                      (the pass keeps up to 3 times as many, ~48 bytes each: within twice the
      #                      text report's memory and time, docs/performance.md)
      # window_intervals:    a --window page's, the one range asked for
      # windows:             the findings that get a window (the first, in the report's order)
      # lanes:               threads drawn one per lane; the rest share one lane
      # findings:            findings listed (each with title, fix and its window)
      # table_rows:          rows of the thread table
      # turns:               event loops' turns (all of them, or those in the intervals' windows)
      Budget = Struct.new(:embed_all_intervals, :detail_intervals, :window_intervals, :windows, :lanes, :bins, :findings,
                          :table_rows, :turns, keyword_init: true)
      BUDGET = Budget.new(embed_all_intervals: 200_000, detail_intervals: 200_000, window_intervals: 1_000_000, windows: 20,
                          lanes: 200, bins: Analysis::Overview::BINS, findings: 100, table_rows: 1000, turns: 200_000).freeze
      SHARE_ONE = 0xFFFF # an overview bin's share of a state, in 1/65535 of the bin (uint16)
      # The data's characters that HTML reads inside <script>: "</script>" ends it and "<!--<script>"
      # keeps the script open to the end of the page (the viewer never starts); U+2028/2029 end a line in older
      # JavaScript. JSON has them only inside strings, where \uXXXX means the same character.
      SCRIPT_UNSAFE = /[<>&\u2028\u2029]/
      SCRIPT_ESCAPES = { "<" => "\\u003c", ">" => "\\u003e", "&" => "\\u0026",
                         "\u2028" => "\\u2028", "\u2029" => "\\u2029" }.freeze

      # +window+: [from_ns, to_ns] (`gvlscope report --window`): the page's intervals are those of
      # that range only (one pass), the overview everywhere, and it opens on that range.
      def initialize(subject, budget: BUDGET, window: nil)
        super(subject)
        @budget = budget
        @window = window
      end

      # Once written, with a +window+: [from_ns, to_ns] the page holds every interval of; to_ns is
      # earlier than asked when the range held more than Budget#window_intervals.
      attr_reader :window_held

      def write(io)
        template = File.read(TEMPLATE)
        data = JSON.generate(model).gsub(SCRIPT_UNSAFE, SCRIPT_ESCAPES)
        page = template.sub("/*GVLSCOPE_VIEWER*/") { File.read(VIEWER) }
                       .sub("/*GVLSCOPE_DATA*/") { "const REPORT = #{data};" }
                       .sub("<!--GVLSCOPE_TITLE-->") { escape(File.basename(@subject.file.path.to_s)) }
        io << page
      end

      private

      def model
        report = @subject
        unit_ns = [(report.duration_ns / 0xFFFF_FFFF.to_f).ceil, 1].max
        findings = report.findings.first(@budget.findings)
        rows = report.rows
        table_rows = rows.sort_by { |row| -row.wait_ns }.first(@budget.table_rows)
        table = ThreadTable.lines(table_rows)
        if rows.size > table_rows.size
          table << "  (#{rows.size - table_rows.size} more threads, that waited less: gvlscope report FILE lists them all)"
        end
        table.concat(ThreadTable.legend(table_rows))
        {
          file: report.file.path.to_s,
          durationNs: report.duration_ns,
          unitNs: unit_ns,
          states: CODES.keys.map(&:to_s),
          labels: CODES.keys.map { |code| label(code) },
          summary: "#{ReportText.new(report).header.join("\n")}\n",
          findings: findings.map do |finding|
            # Findings that say which wait they explain (a Report's; not every finding-like row does).
            explains = finding.to_h[:explains_wait_ns] && finding.explains
            { kind: finding.kind, thread: finding.thread, title: finding.title, fix: finding.fix,
              focus_ns: finding.focus_ns, holder: holder_of(finding), explains: explains }
          end,
          findingsTotal: report.findings.size,
          # The text report's own sentence, which names the findings it looks for.
          noFindings: report.findings.empty? ? ReportText.no_findings : nil,
          table: table,
          histograms: histograms,
          stacks: stacks(findings),
        }.merge(timeline_data(rows, findings, unit_ns))
      end

      # The timeline's data: the lanes (one per shown thread, then the others' average), which
      # intervals are on the page and the overview's bins.
      def timeline_data(rows, findings, unit_ns)
        report = @subject
        shown, others = split_lanes(rows, findings)
        events = report.file.size
        # A thread: its events + 1 intervals at most.
        mode = @window.nil? && events + rows.size <= @budget.embed_all_intervals ? "all" : "windows"
        # The overview is drawn wherever intervals are not: everywhere zoomed out, unless every
        # interval of every lane is on the page.
        overview = report.overview(bins: @budget.bins) if mode == "windows" || others.any?
        others_bins = overview.sum(others.map(&:serial)) unless others.empty?
        busiest = nil
        if mode == "all"
          windows = [[0, report.duration_ns]]
          intervals = [fetch([[0, report.duration_ns, @budget.embed_all_intervals]]).first]
        elsif @window
          pieces = details([[*@window, @budget.window_intervals]])
          @window_held = pieces.first.take(2)
          windows, intervals = join(pieces)
        else
          pieces, busiest = finding_and_busiest_details(findings, overview, shown, others_bins)
          pieces << busiest if busiest
          windows, intervals = join(pieces)
        end
        by_thread = lane_intervals(intervals, unit_ns)
        turns, turns_in = page_turns(shown, windows)
        lanes = shown.map do |row|
          lane(row, by_thread[row.serial], mode == "windows" ? overview : nil).merge(fiber_lane(turns[row.serial], unit_ns))
        end
        if others_bins
          lanes << { label: "#{others.size} other threads (average)", serial: nil, ractor: nil, count: 0, others: others.size,
                     codes: "", times: "", bins: bins(others_bins, overview.bin_ns * others.size) }
        end
        {
          threads: lanes,
          timeline: {
            mode: mode, events: events, intervals: lanes.sum { |lane| lane[:count] }, windows: windows,
            busiest: busiest&.take(2), binNs: overview&.bin_ns, bins: overview&.bins, threadsTotal: rows.size,
            lanesShown: shown.size, asked: @window, detailLimit: BUDGET.window_intervals, # what --window takes
            **(turns_in ? { turns: turns_in } : {}),
          },
        }
      end

      # The turns on the page by thread serial, and where the page has every turn: "all" (up to
      # Budget#turns), else "windows" (those meeting the intervals' windows, up to Budget#turns);
      # nil (no key: the page of a trace without turns is as it was) when none.
      def page_turns(shown, windows)
        timeline = @subject.timeline
        serials = shown.to_set(&:serial)
        turns = (timeline.respond_to?(:turns) ? timeline.turns : []).select { |turn| serials.include?(turn.thread) }
        return [{}, nil] if turns.empty?

        if turns.size <= @budget.turns
          [turns.group_by(&:thread), "all"]
        else
          kept = turns.lazy.select { |turn| windows.any? { |from, to| turn.start_ns < to && turn.end_ns > from } }.first(@budget.turns)
          [kept.group_by(&:thread), "windows"]
        end
      end

      # A loop thread's turns as its lane's "fibers" ({} for other threads): count, the fibers'
      # serials and the times as #lane's (BER, in unitNs: the gap since the previous turn's end,
      # then its length; the same integer division as the intervals', so they line up).
      def fiber_lane(turns, unit_ns)
        return {} unless turns

        times = []
        last = 0
        turns.each do |turn|
          start = turn.start_ns / unit_ns
          finish = turn.end_ns / unit_ns
          times << start - last << finish - start
          last = finish
        end
        { fibers: { count: turns.size, serials: [ber(turns.map(&:fiber))].pack("m0"), times: [ber(times)].pack("m0") } }
      end

      # The rows that get a lane of their own (in the report's order) and the rest: up to
      # Budget#lanes, those a finding names first, then those that ran and waited most.
      def split_lanes(rows, findings)
        return [rows, []] if rows.size <= @budget.lanes

        named = findings.flat_map(&:threads).to_set
        ranked = rows.sort_by.with_index { |row, index| [named.include?(row.label) ? 0 : 1, -(row.run_ns + row.wait_ns), index] }
        kept = ranked.first(@budget.lanes).to_set
        rows.partition { |row| kept.include?(row) }
      end

      # The intervals around the findings and where the threads waited most, all in one pass of the
      # engine over the trace (Report#details_columns). Returns the findings' windows and the
      # busiest one (or nil) as [from_ns, to_ns, intervals in time order], [from, to) the time each
      # holds every interval of.
      #
      # Around each finding's focus, a window (Budget#windows at most, those that meet merged), each
      # with an equal share of Budget#detail_intervals: the focus and twice its length on each side
      # (1 ms at least); if its share ends before the focus does, the focus and half its length on
      # each side (what the finding's link shows), fetched in the same pass; if still too many,
      # from its start up to the last interval that fits.
      #
      # What they leave goes to where the threads waited most (#busiest_span). That window is
      # fetched at its longest, as if the findings took nothing, and cut to what they leave once
      # their counts are known: the intervals of a shorter window inside it are among those of the
      # longer one.
      def finding_and_busiest_details(findings, overview, shown, others_bins)
        wanted = finding_windows(findings)
        share = wanted.empty? ? 0 : [@budget.detail_intervals / wanted.size, 1].max
        centre = busiest_centre(overview, shown, others_bins)
        widest = busiest_span(centre, @budget.detail_intervals, [], overview)
        duration = @subject.duration_ns
        narrower = wanted.map do |_from, _to, focus_from, focus_to|
          half = (focus_to - focus_from) / 2
          [[focus_from - half, 0].max, [focus_to + half, duration].min, share]
        end
        # The narrower windows too, though most go unused: one pass costs more than their intervals.
        found = details(wanted.map { |from, to, _focus_from, _focus_to| [from, to, share] } + narrower +
                        (widest ? [[*widest, @budget.detail_intervals]] : []))
        widest_piece = found.pop if widest
        narrower_pieces = found.pop(narrower.size)
        pieces = wanted.zip(found, narrower_pieces).map do |(_from, _to, _focus_from, focus_to), piece, narrower_piece|
          piece[1] >= focus_to ? piece : narrower_piece # cut short before the end of its focus: the focus with less around it
        end
        found = narrower_pieces = nil # the windows not taken are garbage now
        busiest = if widest_piece
                    remaining = @budget.detail_intervals - pieces.sum { |piece| piece[2].size }
                    span = busiest_span(centre, remaining, pieces, overview)
                    span && inside(widest_piece, *span, remaining)
                  end
        [pieces, busiest]
      end

      # The findings' windows, merged where they meet: [[from, to, first focus's start, last focus's end], ...].
      def finding_windows(findings)
        focuses = findings.filter_map(&:focus_ns).first(@budget.windows)
        duration = @subject.duration_ns
        wanted = focuses.map do |from, to|
          margin = [2 * (to - from), 1_000_000].max
          [[from - margin, 0].max, [to + margin, duration].min, from, to]
        end
        wanted.sort.each_with_object([]) do |window, all|
          last = all.last
          if last && window[0] <= last[1]
            last[1] = [last[1], window[1]].max
            last[3] = [last[3], window[3]].max
          else
            all << window.dup
          end
        end
      end

      # The middle of the overview's slice with the most wait (the most run if none).
      def busiest_centre(overview, shown, others_bins)
        totals = overview.sum(shown.map(&:serial))
        totals = totals.zip(others_bins).map(&:sum) if others_bins
        width, at = Analysis::Overview::STATES.size, Analysis::Overview::STATE_INDEX
        peak = (0...overview.bins).max_by { |bin| [totals[width * bin + at[:wait]], totals[width * bin + at[:run]]] }
        overview.start_ns + peak * overview.bin_ns + overview.bin_ns / 2
      end

      # [from, to] around +centre+ for +remaining+ intervals: as long as the trace's mean density
      # puts about half of them in it, clear of +windows+ ([from, to, ...] each); nil when one holds
      # the centre, or when less than a tenth of Budget#detail_intervals is left. So a trace
      # without findings shows intervals too.
      def busiest_span(centre, remaining, windows, overview)
        return nil if remaining <= 0 || remaining < @budget.detail_intervals / 10

        duration = @subject.duration_ns
        per_ns = [@subject.file.size, 1].max.fdiv([duration, 1].max)
        length = [(remaining / 2 / per_ns).to_i, overview.bin_ns].max
        from = [centre - length / 2, 0].max
        to = [from + length, duration].min
        windows.each do |window_from, window_to|
          return nil if window_from <= centre && centre < window_to

          from = [from, window_to].max if window_to <= centre
          to = [to, window_from].min if window_from > centre
        end
        [from, to]
      end

      # What Report#detail(from, to, limit:) gives, taken from a piece whose window holds [from, to)
      # (no pass): its intervals are in the same order, and every one that starts before its end.
      # (It may hold some intervals that start at its end, as a window cut short holds its last.)
      def inside(piece, from, to, limit)
        return nil if [to, piece[1]].min <= from

        all = piece[2]
        before_to = all.first_starting_at(to)
        from_on = [all.first_starting_at(from), before_to].min
        # Those that start before +from+ meet it when they end after it; all that start from it on do.
        taken = (0...from_on).select { |index| all.ends[index] > from }.first(limit)
        taken.concat((from_on...[before_to, from_on + limit - taken.size].min).to_a)
        found = all.pick(taken)
        [from, end_of([to, piece[1]].min, found, limit), found]
      end

      # [[from, to, intervals], ...] for each [from, to, limit], in one call of Report#details (one
      # pass of the engine).
      def details(requests)
        return [] if requests.empty?

        fetch(requests).zip(requests).map do |found, (from, to, limit)|
          [from, end_of(to, found, limit), found]
        end
      end

      # The intervals of each [from, to, limit] as Model::IntervalColumns: no object per interval,
      # for a budget of a million.
      def fetch(requests) = @subject.details_columns(requests, limit: nil)

      # A window's end, moved back to the start of its last interval when it had +limit+ (every
      # interval that starts before it is there).
      def end_of(to, found, limit) = found.size.positive? && found.size >= limit ? found.starts.last : to

      # The windows in time order ([from, to] each) and their intervals (IntervalColumns, one per
      # window) in time order, each once: a long interval that reaches into the window before was
      # taken with it.
      def join(pieces)
        windows = []
        intervals = []
        pieces.sort_by(&:first).each do |from, to, found|
          covered_before = windows.last&.last
          found = found.pick(found.first_starting_at(covered_before)..) if covered_before
          windows << [from, to]
          intervals << found
        end
        [windows, intervals]
      end

      # The thread whose code a finding is about when it held the GVL (its kind's FindingKind#holder): a hog
      # or a long hold itself, a convoy's main holder; nil for the others (contention: everyone's), which
      # then show all threads' profile.
      def holder_of(finding)
        case Analysis::KINDS.fetch(finding.kind).holder
        when :about then finding.thread
        when :main_holder then finding.evidence[:holders]&.keys&.find { |holder| holder.is_a?(String) }
        end
      end

      # nil without stacks (the page says "stacks: not recorded"); else the profiles and the sites.
      def stacks(findings)
        timeline = @subject.timeline
        return nil unless timeline.stacks?

        frames = {}
        holders = findings.filter_map { |finding| holder_of(finding) }.uniq
        samples_of = timeline.samples.group_by { |sample| timeline.threads[sample.thread]&.label }
        {
          samples: timeline.samples.size,
          all: tree(timeline.samples, PROFILE_NODES, frames),
          threads: holders.to_h { |label| [label, tree(samples_of.fetch(label, []), THREAD_PROFILE_NODES, frames)] },
          frames: frames.keys.map { |frame| [frame.label, frame.path, frame.line] },
          sites: release_sites,
        }
      end

      # A call tree as flat arrays in drawing order (each node after its parent, children heaviest
      # first): parent index (-1 at the root), frame index in +frames+ (-1 at the root), weight.
      def tree(samples, max_nodes, frames)
        parents = []
        frame_ids = []
        weights = []
        visit = lambda do |node, parent|
          index = parents.size
          parents << parent
          frame_ids << (node.frame ? frames[node.frame] ||= frames.size : -1)
          weights << node.weight
          node.children.each { |child| visit.call(child, index) }
        end
        visit.call(Analysis::StackProfile.new(samples).tree(max_nodes: max_nodes), -1)
        { samples: samples.size, parent: parents, frame: frame_ids, weight: weights }
      end

      def release_sites
        @subject.code_locations.release_sites.first(RELEASE_SITES).map do |row|
          { site: row.name.delete("`"), cause: row.cause.to_s, wait: Units.ms(row.weight), share: row.share.round(4),
            calls: row.count }
        end
      end

      # What the legend and the hover box say for a code: the state, or "idle (IO / sleep)".
      def label(code)
        reason = Vocabulary::IDLE_REASONS[code]
        reason ? "idle (#{reason})" : code.to_s
      end

      def histograms
        h = @subject.histograms
        HistogramText.report_sections(h[:hold_ns], h[:wait_ns], h[:waiters_at_acquire])
      end

      # Each thread's intervals on the page, from the windows' IntervalColumns (in time order):
      # serial => [state codes, times], the codes (uint8) of CODES and the times in unitNs, for
      # each interval the gap since the end of the one before (0 but between windows) then its
      # length. One pass, integer division only: the page may hold a million intervals.
      def lane_intervals(pieces, unit_ns)
        lanes = Hash.new { |all, serial| all[serial] = [[], [], 0] } # codes, times, the last one's end
        pieces.each do |found|
          serials, states, reasons, starts, ends = found.to_a
          found.size.times do |index|
            lane = lanes[serials[index]]
            state = states[index]
            lane[0] << (state == :idle ? IDLE_CODES.fetch(reasons[index]) : CODES.fetch(state))
            start = starts[index] / unit_ns
            finish = ends[index] / unit_ns
            lane[1] << start - lane[2] << finish - start
            lane[2] = finish
          end
        end
        lanes
      end

      # A thread's lane: its intervals on the page ([codes, times] of #lane_intervals, or nil)
      # and its overview bins. The intervals are two base64 strings: the codes, and the times as
      # BER integers (pack "w": 7 bits a byte): 3 to 4 bytes an interval where three uint32 would take 9.
      def lane(row, (codes, times), overview)
        codes ||= []
        {
          label: Vocabulary.thread_display_name(row.label, row.created_at), serial: row.serial, ractor: row.ractor_id,
          count: codes.size, others: 0, codes: [codes.pack("C*")].pack("m0"), times: [ber(times.to_a)].pack("m0"),
          bins: overview && bins(overview.lane(row.serial), overview.bin_ns)
        }
      end

      # +values+ (Integers >= 0) as BER integers, the bytes of pack("w*"), which makes a String per
      # value: the page's times are millions of them, nearly all of one or two bytes.
      def ber(values)
        bytes = String.new(capacity: 2 * values.size, encoding: Encoding::BINARY)
        values.each do |value|
          if value < 0x80 then bytes << value
          elsif value < 0x4000 then bytes << (0x80 | (value >> 7)) << (value & 0x7F)
          else bytes << [value].pack("w")
          end
        end
        bytes
      end

      # Overview bins (run, wait, idle, gc ns per bin) as shares of +full_ns+, uint16 little-endian
      # in base64: 8 bytes a bin whatever the trace's length.
      def bins(values, full_ns)
        half = full_ns / 2
        [values.map { |ns| ((ns * SHARE_ONE + half) / full_ns).clamp(0, SHARE_ONE) }.pack("S<*")].pack("m0")
      end

      def escape(text) = text.gsub("&", "&amp;").gsub("<", "&lt;").gsub(">", "&gt;")
    end
  end
end
