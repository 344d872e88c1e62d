# frozen_string_literal: true

require "test_helper"
require "cgi"
require "tmpdir"
require "gvlscope/analysis"
require "gvlscope/formats/report_html"
require_relative "../support/headless_chromium"
require_relative "../support/synthetic_report"
require_relative "../support/reference_timeline"
require_relative "../support/loop_turns"

# The HTML report opened in a real headless Chromium (Debian's chromium package, which
# script/test installs): it must render without a JavaScript error and show every thread, the
# holders' icicle graph (the hog's method in it) and the release sites; a finding's link zooms
# the timeline and shows its holder's profile. A screenshot is left in tmp/report-html-test.png
# for people to look at.
# Run alone: bundle exec ruby -Itest test/formats/report_html_test.rb
class ReportHTMLTest < Minitest::Test
  include GVLScopeTestHelper
  include HeadlessChromium
  include LoopTurns

  SPIN_FILE = File.join(ROOT, "test/support/gvl_workloads.rb")
  NOT_RECORDED = '<div id="stacks">stacks: not recorded' # the section's text, not the script's

  def setup
    @dir = Dir.mktmpdir("gvlscope-html")
  end

  def teardown
    FileUtils.rm_rf(@dir)
  end

  # A report of the hog beside a reader; its threads' names need escaping.
  def hog_report
    trace = File.join(@dir, "t.gvl")
    trace_program(trace, 'GVLWorkloads.cpu_beside_reader("cpu <b>&", 4)')
    GVLScope::Analysis::Report.new(GVLScope::Model.timeline(trace))
  end

  def write_html(report, extra_script: nil, budget: GVLScope::Formats::ReportHTML::BUDGET)
    html = File.join(@dir, "report.html")
    File.open(html, "w") { |io| GVLScope::Formats::ReportHTML.new(report, budget: budget).write(io) }
    File.write(html, File.read(html).sub("</body>", "<script>#{extra_script}</script>\n</body>")) if extra_script
    html
  end

  # The page after the viewer ran: [DOM, <body>'s data attributes].
  def render(html)
    dom, log, status = chromium("--virtual-time-budget=10000", "--dump-dom", "file://#{html}")
    assert status.success?, log
    body = dom[/<body[^>]*>/]
    assert_match(/data-rendered="ok"/, body, "the viewer did not finish drawing:\n#{log}")
    refute_match(/data-errors/, body, "JavaScript errors: #{body}")
    refute_match(/Uncaught/, log)
    [dom, body.scan(/ data-([\w-]+)="([^"]*)"/).to_h { |name, value| [name, CGI.unescapeHTML(value)] }]
  end

  def escape(text) = text.gsub("&", "&amp;").gsub("<", "&lt;").gsub(">", "&gt;")

  # The page's data, as the viewer gets it.
  def page_data(html) = JSON.parse(File.read(html)[/^const REPORT = (.*);$/, 1])

  # A script that clicks the link of finding +index+, after the page has drawn.
  def click_finding(index) = %(document.querySelectorAll("#findings .finding")[#{index}].querySelector("a").click();)

  # The page of a trace too big to record here (test/support/synthetic_report.rb): 2,000 threads,
  # 100M events, 30 findings, more intervals around each than the page takes. Made once.
  def self.big_page
    @big_page ||= begin
      path = File.join(Dir.mktmpdir("gvlscope-html-big"), "big.html")
      Minitest.after_run { FileUtils.rm_rf(File.dirname(path)) }
      File.open(path, "w") { |io| GVLScope::Formats::ReportHTML.new(SyntheticReport.new).write(io) }
      path
    end
  end

  def test_the_report_renders_every_thread_the_holders_and_the_release_sites_without_errors
    report = hog_report
    html = write_html(report)
    refute_match(%r{https?://}, File.read(html), "the report must not load anything from the network")

    dom, data = render(html)
    assert_equal report.timeline.threads.size.to_s, data["lanes"]
    assert_operator data["rectangles"].to_i, :>=, report.timeline.threads.size
    report.timeline.threads.each_value do |thread|
      assert_includes dom, escape(thread.label), "thread #{thread.label} is missing from the page"
    end
    report.findings.each { |finding| assert_includes dom, escape(finding.title) }

    # The icicle: the hog's method is one of its frames, and the heaviest below the root.
    assert_equal "ok", data["flame"]
    assert_operator data["flame-nodes"].to_i, :>, 0
    assert_equal "", data["flame-thread"], "all threads at first"
    frames = dom.scan(%r{<div [^>]*data-node="(\d+)"[^>]*>([^<]*)</div>}).map { |node, name| [node.to_i, CGI.unescapeHTML(name)] }
    assert_equal data["flame-nodes"].to_i, frames.size
    assert_includes frames.map(&:last), "GVLWorkloads.spin"
    # The release sites: the reader's IO#read, first or tied first.
    table = dom[%r{<table id="sites">.*?</table>}m]
    # (its path as thread labels show paths: relative to the working directory, Vocabulary.short_site)
    assert_match(/IO#read at #{Regexp.escape(GVLScope::Vocabulary.short_site(SPIN_FILE))}:\d+/, table)
    assert_operator table.scan("<tr>").size, :>=, 3
    refute dom.include?(NOT_RECORDED), "a trace with stacks says they were not recorded"

    FileUtils.mkdir_p(File.join(ROOT, "tmp"))
    screenshot = File.join(ROOT, "tmp", "report-html-test.png")
    _out, log, status = chromium("--virtual-time-budget=10000", "--screenshot=#{screenshot}", "file://#{html}")
    assert status.success?, log
    assert_operator File.size(screenshot), :>, 10_000
  end

  # Hover on the hog's frame, then a click on the hog finding's link: the tooltip names the frame,
  # its file:line and share; the timeline zooms to the finding's focus and the icicle shows the
  # hog's own profile.
  def test_hovering_a_frame_and_clicking_a_finding
    report = hog_report
    index = report.findings.index { |finding| finding.kind == :hog }
    refute_nil index, "no hog finding: #{report.findings.map(&:title)}"
    hog = report.findings[index]
    html = write_html(report, extra_script: <<~JS)
      const spin = [...document.querySelectorAll("#flame div")].find((div) => div.textContent === "GVLWorkloads.spin");
      const at = spin.getBoundingClientRect();
      spin.dispatchEvent(new MouseEvent("mousemove", { bubbles: true, clientX: at.left + 5, clientY: at.top + 5 }));
      document.body.dataset.probeTooltip = document.getElementById("flame-tooltip").textContent;
      document.querySelectorAll("#findings .finding")[#{index}].querySelector("a").click();
    JS

    _dom, data = render(html)
    assert_match(/\AGVLWorkloads\.spin at #{Regexp.escape(GVLScope::Vocabulary.short_site(SPIN_FILE))}:#{GVLWorkloads::SPIN_LINE}: (9\d|100)(\.\d+)?% of the waiting/,
                 data["probe-tooltip"])
    assert_equal hog.thread, data["flame-thread"]
    assert_operator data["flame-nodes"].to_i, :>, 0
    from, to = data["view"].split(",").map(&:to_i)
    assert_operator from, :<=, hog.focus_ns[0]
    assert_operator to, :>=, hog.focus_ns[1]
    assert_operator to - from, :<, report.duration_ns, "the timeline did not zoom in"
  end

  # "<!--<script>" in the page's data kept its script open to the end of the page: a blank report.
  def test_a_thread_named_like_html_markup_leaves_the_viewer_working
    trace = File.join(@dir, "t.gvl")
    name = "<!--<script>\u2028&"
    trace_program(trace, "GVLWorkloads.cpu_beside_reader(#{name.inspect}, 4)")
    report = GVLScope::Analysis::Report.new(GVLScope::Model.timeline(trace))
    html = write_html(report)
    dom, data = render(html)
    refute_includes File.read(html)[/^const REPORT = .*$/], "<"
    assert_equal report.timeline.threads.size.to_s, data["lanes"]
    assert_includes dom, escape("<!--<script>"), "the thread is missing from the page"
    assert_includes JSON.generate(page_data(html)), name, "the data holds the name as it was"
  end

  def test_a_trace_without_stacks_says_so
    report = GVLScope::Analysis::Report.new(GVLScope::Model.timeline(File.join(ROOT, "test/fixtures/traces/convoy.gvl")))
    dom, data = render(write_html(report))
    assert_equal "none", data["flame"]
    assert dom.include?(NOT_RECORDED), dom[%r{<h2>Where the waiting.*?</div>}m]
  end

  # loop.gvl's event loop: under the loop thread's lane, a lane of its turns (Model::Turns, as
  # every export draws them); hovered, each turn says its fiber, its duration and its start.
  def test_a_loops_turns_have_a_lane_under_its_thread
    report = GVLScope::Analysis::Report.new(GVLScope::Model.timeline(LOOP))
    # Each turn zoomed to (its middle at the centre of the view), hovered on the fibers lane (the
    # third: main, the loop's thread, its fibers), its tooltip kept.
    hover = <<~JS
      const box = document.getElementById("timeline").getBoundingClientRect(), said = [];
      for (const [fiber, start, end] of #{JSON.generate(TURNS)}) {
        const margin = Math.max((end - start) * 0.5, 10);
        view = { from: start - margin, to: end + margin };
        draw();
        const x = box.left + LABEL_WIDTH + (box.width - LABEL_WIDTH) / 2, y = box.top + AXIS + 2 * LANE + LANE / 2;
        document.getElementById("timeline").dispatchEvent(new MouseEvent("mousemove", { clientX: x, clientY: y }));
        said.push(document.getElementById("tooltip").textContent);
      }
      document.body.dataset.probeTurns = said.join("\\n");
    JS
    html = write_html(report, extra_script: hover)
    data = page_data(html)
    assert_equal 1, data["unitNs"]
    assert_equal "all", data["timeline"]["turns"]
    main, loop_lane = data["threads"]
    assert_equal [nil, LOOP_NAME], [main["fibers"], loop_lane["label"]]
    assert_equal TURNS, page_turns(loop_lane)

    _dom, shown = render(html)
    assert_equal "3", shown["lanes"], "main, the loop's thread and its fibers"
    assert_equal "2", shown["turns-drawn"], "the last turn and the end of the one before it, in its view"
    expected = TURNS.map do |fiber, start_ns, end_ns|
      "#{LOOP_NAME}: fiber #{fiber} for #{format_ns(end_ns - start_ns)} at #{format_ns(start_ns)}"
    end
    assert_equal expected, shown["probe-turns"].split("\n")
  end

  # Beyond Budget#turns, the page holds the turns that meet its intervals' windows, the first
  # Budget#turns of them; a trace without turns has neither the key nor a fibers lane.
  def test_the_turns_keep_to_the_budget
    report = GVLScope::Analysis::Report.new(GVLScope::Model.timeline(LOOP))
    budget = GVLScope::Formats::ReportHTML::Budget.new(**GVLScope::Formats::ReportHTML::BUDGET.to_h, turns: 3)
    data = page_data(write_html(report, budget: budget))
    assert_equal "windows", data["timeline"]["turns"]
    assert_equal [[0, report.duration_ns]], data["timeline"]["windows"]
    assert_equal TURNS.first(3), page_turns(data["threads"][1])
    _dom, shown = render(write_html(report, budget: budget))
    assert_equal "3", shown["lanes"]

    plain = page_data(write_html(GVLScope::Analysis::Report.new(GVLScope::Model.timeline(File.join(ROOT, "test/fixtures/traces/hog.gvl")))))
    refute plain["timeline"].key?("turns")
    assert(plain["threads"].none? { |lane| lane.key?("fibers") })
  end

  # A fibers lane's turns, [fiber, start, end] in the page's units.
  def page_turns(lane)
    fibers = lane.fetch("fibers")
    serials = fibers["serials"].unpack1("m0").unpack("w*")
    at = 0
    times = fibers["times"].unpack1("m0").unpack("w*").each_slice(2).map { |gap, length| [at += gap, at += length] }
    assert_equal [fibers["count"]] * 2, [serials.size, times.size]
    serials.zip(times).map(&:flatten)
  end

  # What the viewer's formatNs writes: three significant digits, no trailing zeros.
  def format_ns(ns)
    value, unit = [[1e9, "s"], [1e6, "ms"], [1e3, "us"]].find { |scale, _| ns >= scale } || [1, "ns"]
    "#{format('%.3g', ns / value.to_f)} #{unit}"
  end

  # Beyond the budget, the timeline shows the overview's bins, and the intervals themselves in a
  # window around each finding: a finding's link zooms into them. A small trace made to go over a
  # tiny budget, so the old path's Overview and detail are what the page holds.
  def test_beyond_the_budget_bins_everywhere_but_around_the_findings
    report = hog_report
    index = report.findings.index { |finding| finding.kind == :hog }
    refute_nil index, "no hog finding: #{report.findings.map(&:title)}"
    tiny = GVLScope::Formats::ReportHTML::BUDGET.to_h.merge(embed_all_intervals: 0)
    no_windows = GVLScope::Formats::ReportHTML::Budget.new(**tiny, windows: 0, detail_intervals: 0)
    html = write_html(report, budget: no_windows)
    data = page_data(html)
    assert_equal "windows", data["timeline"]["mode"]
    assert_equal [], data["timeline"]["windows"]
    assert_equal 0, data["timeline"]["intervals"]
    dom, bins_only = render(html)
    assert_equal report.rows.size.to_s, bins_only["lanes"]
    assert_equal "0", bins_only["intervals-drawn"]
    assert_operator bins_only["bin-columns"].to_i, :>, 1000, "the bins were not drawn"
    assert_includes dom, "each lane shows the share of run, gc, wait and idle in each pixel"

    html = write_html(report, budget: GVLScope::Formats::ReportHTML::Budget.new(**tiny), extra_script: click_finding(index))
    data = page_data(html)
    focus = report.findings[index].focus_ns
    windows = data["timeline"]["windows"]
    assert(windows.any? { |from, to| from <= focus[0] && to >= focus[1] }, windows.inspect)
    expected = report.timeline.threads.values.sum do |thread|
      thread.intervals.count { |i| windows.any? { |from, to| i.start_ns < to && (i.end_ns > from || i.start_ns >= from) } }
    end
    assert_equal expected, data["threads"].sum { |lane| lane["count"] }
    _dom, zoomed = render(html)
    from, to = zoomed["view"].split(",").map(&:to_i)
    assert_operator from, :<=, focus[0]
    assert_operator to, :>=, focus[1]
    assert_operator zoomed["intervals-drawn"].to_i, :>, 0, "the finding's intervals were not drawn"
  end

  # Without findings, the intervals budget goes to where the threads waited most: a window
  # around the overview's slice with the most wait, sized by the trace's mean density.
  def test_without_findings_the_intervals_go_where_the_threads_waited_most
    report = GVLScope::Analysis::Report.new(GVLScope::Model.timeline(File.join(ROOT, "test/fixtures/traces/mixed.gvl")))
    assert_empty report.findings
    budget = GVLScope::Formats::ReportHTML::Budget.new(**GVLScope::Formats::ReportHTML::BUDGET.to_h, embed_all_intervals: 0,
                                                          detail_intervals: 600, bins: 50)
    data = page_data(write_html(report, budget: budget))
    assert_match(/\ANo findings: no convoy/, data["noFindings"])
    assert_includes GVLScope::Formats::ReportText.new(report).to_s.lines.map(&:chomp), data["noFindings"], "the text report's words"
    timeline = data["timeline"]
    overview = report.overview(bins: 50)
    waits = (0...50).map { |bin| report.all_rows.sum { |row| overview.lane(row.serial)[4 * bin + 1] } }
    peak = waits.index(waits.max)
    from, to = timeline["busiest"]
    assert_equal [[from, to]], timeline["windows"]
    assert_operator from, :<=, (peak + 0.5) * overview.bin_ns
    assert_operator to, :>, (peak + 0.5) * overview.bin_ns
    # 930 events in 0.3 s: 300 (half the budget) take ~96 ms.
    assert_in_delta 300 * report.duration_ns / report.file.size, to - from, overview.bin_ns
    all = report.timeline.threads.values.flat_map(&:intervals)
    inside = all.count { |i| i.start_ns < to && (i.end_ns > from || i.start_ns >= from) }
    assert_equal inside, timeline["intervals"]
  end

  THRASH = File.join(ROOT, "test/fixtures/traces/thrash.gvl") # 12,056 events in 53 ms

  # +report+ with +count+ made-up findings spread over the trace, each focused on +focus_ns+.
  def with_findings(report, count, focus_ns)
    made = (1..count).map do |index|
      at = report.duration_ns / (count + 1) * index
      GVLScope::Analysis::Finding.new(kind: :convoy, about: ["reader 0"], threads: ["reader 0"], title: "made up #{index}",
                                      evidence: {}, fix: "-", focus_ns: [at, at + focus_ns], explains_wait_ns: 0, wait_share: 0.0)
    end
    report.define_singleton_method(:findings) { made }
    report
  end

  def windows_budget(detail_intervals, windows: 20)
    GVLScope::Formats::ReportHTML::Budget.new(**GVLScope::Formats::ReportHTML::BUDGET.to_h, embed_all_intervals: 0,
                                                 detail_intervals: detail_intervals, window_intervals: detail_intervals,
                                                 windows: windows)
  end

  # The page's intervals come from one pass of the engine over the trace for all the findings'
  # windows and the busiest one: the same page the plain Ruby reference gives (whose Report#detail
  # reads each window on its own from its intervals), every interval of each window.
  def test_all_the_windows_cost_one_pass_of_the_engine
    scan = with_findings(GVLScope::Analysis::Report.new(GVLScope::Model::Scan.open(THRASH, bins: 2000)), 5, 100_000)
    old = with_findings(ReferenceReport.new(ReferenceTimeline.open(THRASH)), 5, 100_000)
    passes = scan.timeline.passes
    html = write_html(scan, budget: windows_budget(20_000))
    assert_equal 1, scan.timeline.passes - passes, "passes for the page's intervals"
    data = page_data(html)
    windows = data["timeline"]["windows"]
    assert_equal 6, windows.size, "5 findings' windows and the busiest: #{windows}"
    refute_nil data["timeline"]["busiest"]
    assert_equal File.read(html), File.read(write_html(old, budget: windows_budget(20_000))), "the reference's page"
    expected = old.timeline.threads.values.sum do |thread|
      thread.intervals.count { |i| windows.any? { |from, to| i.start_ns < to && (i.end_ns > from || i.start_ns >= from) } }
    end
    assert_equal expected, data["timeline"]["intervals"]
    old.findings.each do |finding|
      focus_from, focus_to = finding.focus_ns
      assert_includes windows, [focus_from - 1_000_000, focus_to + 1_000_000], "its window, whole: the focus and 1 ms on each side"
    end
  end

  # Windows whose share of intervals ends before their focus does take their narrower window
  # instead (the focus and half its length on each side), fetched in the same pass: one pass in
  # all, where there was one a window, then one more for the windows cut short.
  def test_windows_cut_short_cost_no_more_pass
    scan = with_findings(GVLScope::Analysis::Report.new(GVLScope::Model::Scan.open(THRASH, bins: 2000)), 5, 1_000_000)
    old = with_findings(ReferenceReport.new(ReferenceTimeline.open(THRASH)), 5, 1_000_000)
    passes = scan.timeline.passes
    html = write_html(scan, budget: windows_budget(1000))
    assert_equal 1, scan.timeline.passes - passes, "passes for the page's intervals"
    data = page_data(html)
    busiest = data["timeline"].fetch("busiest")
    refute_nil busiest, "the narrower windows left intervals to the busiest"
    assert_operator data["timeline"]["intervals"], :<=, 1000
    windows = data["timeline"]["windows"] - [busiest]
    assert_equal 5, windows.size, windows.inspect
    fetched_again = old.findings.zip(windows).count do |finding, (from, to)|
      focus_from, focus_to = finding.focus_ns
      next false if from == focus_from - 2 * (focus_to - focus_from) && to >= focus_to # its share held the focus

      assert_equal focus_from - (focus_to - focus_from) / 2, from, "fetched again: the focus and half its length before it"
      true
    end
    assert_operator fetched_again, :>=, 3
    assert_equal File.read(html), File.read(write_html(old, budget: windows_budget(1000))), "the reference's page"
  end

  # Zoomed into summaries, the page shows the command that writes a page with every interval of
  # the view (`gvlscope report --window`); that page holds them, and opens on them, without a hint.
  def test_zoomed_into_summaries_the_page_gives_the_command_for_full_detail
    report = GVLScope::Analysis::Report.new(GVLScope::Model::Scan.open(THRASH, bins: 2000))
    focus = "#{report.duration_ns / 2},#{report.duration_ns / 2 + 2_000_000}"
    html = write_html(report, budget: windows_budget(0, windows: 0), extra_script: %(location.hash = "focus=#{focus}";))
    assert_equal [], page_data(html)["timeline"]["windows"]
    dom, zoomed = render(html)
    hint = dom[%r{<div id="detail-hint">(.*?)</div>}m, 1]
    refute_nil hint, "no hint shown: #{dom[/<div id="detail-hint"[^>]*>/]}"
    command = CGI.unescapeHTML(hint[%r{<code id="detail-command">(.*?)</code>}, 1])
    from, to = zoomed["view"].split(",").map(&:to_i)
    range = "#{format('%.6f', (from / 1000) / 1e6).sub(/0+\z/, '')}s..#{format('%.6f', -(-to / 1000) / 1e6).sub(/0+\z/, '')}s"
    assert_equal "gvlscope report #{THRASH} --html thrash-window.html --window #{range}", command
    assert_includes hint, "(up to 1,000,000 intervals)" # what --window takes, whatever this page's budget

    _out, whole = render(write_html(report, budget: windows_budget(0, windows: 0)))
    refute_match(/<div id="detail-hint">/, whole.to_s, "not zoomed in: no hint")
    _out, err, status = gvlscope(*command.split.drop(1), chdir: @dir)
    assert status.success?, err
    page = File.join(@dir, "thrash-window.html")
    timeline = page_data(page)["timeline"]
    first, last = timeline["windows"].first
    assert_operator first, :<=, from
    assert_operator last, :>=, to
    assert_operator timeline["intervals"], :>, 100
    dom, opened = render(page)
    assert_equal timeline["asked"].join(","), opened["view"], "it opens on the range"
    assert_includes dom, '<div id="detail-hint" hidden="">'
    assert_operator opened["intervals-drawn"].to_i, :>, 0
  end

  # A --window range fuller than the page takes: the page holds its first intervals, and says up
  # to where.
  def test_a_window_fuller_than_the_page_holds_its_first_intervals
    report = GVLScope::Analysis::Report.new(GVLScope::Model::Scan.open(THRASH, bins: 2000))
    page = GVLScope::Formats::ReportHTML.new(report, budget: windows_budget(300), window: [1_000_000, report.duration_ns])
    html = File.join(@dir, "w.html")
    File.write(html, page.to_s)
    first = ReferenceReport.new(ReferenceTimeline.open(THRASH)).detail(1_000_000, report.duration_ns, limit: 300)
    assert_equal [1_000_000, first.last.start_ns], page.window_held
    data = page_data(html)
    assert_equal [[1_000_000, first.last.start_ns]], data["timeline"]["windows"]
    assert_equal 300, data["timeline"]["intervals"]
    dom, shown = render(html)
    assert_equal [1_000_000, report.duration_ns].join(","), shown["view"]
    assert_includes dom, "(the range held more than a page takes: it has every one up to #{format('%.6g', first.last.start_ns / 1e6)} ms)"
  end

  # The page's intervals cost no object each: a page of 200,000 intervals (a 600,000-event trace,
  # 20 findings) allocates a few thousand objects in all, where it made three per interval and a
  # String per number of its times (2.5M-event trace: 10 s and 548 MB for the page, text 0.8 s).
  def test_the_pages_intervals_cost_no_object_each
    require_relative "../support/synthetic_trace"
    trace = File.join(@dir, "big.gvl")
    SyntheticTrace.write(trace, events: 600_000)
    report = with_findings(GVLScope::Analysis::Report.new(GVLScope::Model::Scan.open(trace, bins: 2000)), 20, 5_000_000)
    report.findings
    GC.start
    before = GC.stat(:total_allocated_objects)
    page = GVLScope::Formats::ReportHTML.new(report).to_s
    allocated = GC.stat(:total_allocated_objects) - before
    intervals = JSON.parse(page[/^const REPORT = (.*);$/, 1])["timeline"]["intervals"]
    assert_operator allocated, :<, 50_000, "objects for a page of #{intervals} intervals"
    assert_equal GVLScope::Formats::ReportHTML::BUDGET.detail_intervals, intervals
  end

  # The page of a 100M-event trace of 2,000 threads stays under 25 MB: at most Budget#lanes lanes
  # (the busiest and those findings name) and one for the rest, the findings' windows filled up
  # to Budget#detail_intervals, the table cut, and it renders: lanes, and a finding's intervals.
  def test_a_huge_trace_makes_a_page_under_25_mb_that_renders
    html = self.class.big_page
    assert_operator File.size(html), :<=, 25_000_000
    data = page_data(html)
    budget = GVLScope::Formats::ReportHTML::BUDGET
    lanes = data["threads"]
    assert_equal budget.lanes + 1, lanes.size
    assert_equal "1800 other threads (average)", lanes.last["label"]
    assert_equal 1800, lanes.last["others"]
    named = data["findings"].flat_map { |finding| [finding["thread"]] }
    shown = lanes[0...-1].map { |lane| lane["label"][/\Aworker \d+/] }
    assert_empty named - shown, "a thread a finding names has no lane"
    assert_includes shown, "worker 1" # the busiest
    assert_equal budget.detail_intervals, data["timeline"]["intervals"]
    assert_equal budget.windows, data["timeline"]["windows"].size
    table = data["table"].take_while { |line| !line.empty? } # then the legend of "released by"
    assert_equal budget.table_rows + 2, table.size # the header, the rows and "(N more threads...)"

    # A click on a finding's link, then the mouse over the others' lane.
    index = 3
    hover = <<~JS
      window.addEventListener("hashchange", () => { // after the viewer's own listener: zoomed in
        const lanes = document.getElementById("timeline"), at = lanes.getBoundingClientRect();
        lanes.dispatchEvent(new MouseEvent("mousemove", { clientX: at.left + 600, clientY: at.top + 20 + 22 * 200 + 10 }));
        document.body.dataset.probeTooltip = document.getElementById("tooltip").textContent;
      });
    JS
    dom, zoomed = render(html.sub(".html", "-click.html").tap do |clicked|
      File.write(clicked, File.read(html).sub("</body>", "<script>#{hover}#{click_finding(index)}</script>\n</body>"))
    end)
    assert_match(/\A1800 other threads \(average\): run \d+(\.\d+)?%, wait \d+(\.\d+)?%, idle \d+(\.\d+)?%, gc [\d.]+% of [\d.]+ [nu]s at 77\.4 s \(average of 1800 threads\)\z/,
                 zoomed["probe-tooltip"])
    assert_equal lanes.size.to_s, zoomed["lanes"]
    assert_includes dom, "Showing 200 of 2,000 threads"
    focus = data["findings"][index]["focus_ns"]
    from, to = zoomed["view"].split(",").map(&:to_i)
    assert_operator from, :<=, focus[0]
    assert_operator to, :>=, focus[1]
    assert_operator zoomed["intervals-drawn"].to_i, :>=, SyntheticReport::DETAIL_THREADS, "the window's intervals"
    assert_operator zoomed["bin-columns"].to_i, :>, 0, "the others' lane and the view past the window"
  end
end
