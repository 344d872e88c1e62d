# frozen_string_literal: true

require "test_helper"
require "cgi"
require "tmpdir"
require "gvlscope/analysis"
require "gvlscope/formats/report_html"
require_relative "support/headless_chromium"

# The HTML report opened in a real headless Chromium (Debian's chromium package, which
# script/test installs): it must render without a JavaScript error and show every thread, the
# holders' icicle graph (the hog's method in it) and the release sites; a finding's link zooms
# the timeline and shows its holder's profile. A screenshot is left in tmp/report-html-test.png
# for people to look at.
# Run alone: bundle exec ruby -Itest test/report_html_test.rb
class ReportHTMLTest < Minitest::Test
  include GVLScopeTestHelper
  include HeadlessChromium

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

  def write_html(report, extra_script: nil)
    html = File.join(@dir, "report.html")
    File.open(html, "w") { |io| GVLScope::Formats::ReportHTML.new(report).write(io) }
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
    assert_match(/IO#read at #{Regexp.escape(SPIN_FILE)}:\d+/, table)
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
    assert_match(/\AGVLWorkloads\.spin at #{Regexp.escape(SPIN_FILE)}:#{GVLWorkloads::SPIN_LINE}: (9\d|100)(\.\d+)?% of the waiting/,
                 data["probe-tooltip"])
    assert_equal hog.thread, data["flame-thread"]
    assert_operator data["flame-nodes"].to_i, :>, 0
    from, to = data["view"].split(",").map(&:to_i)
    assert_operator from, :<=, hog.focus_ns[0]
    assert_operator to, :>=, hog.focus_ns[1]
    assert_operator to - from, :<, report.duration_ns, "the timeline did not zoom in"
  end

  def test_a_trace_without_stacks_says_so
    report = GVLScope::Analysis::Report.new(GVLScope::Model.timeline(File.join(ROOT, "test/fixtures/traces/convoy.gvl")))
    dom, data = render(write_html(report))
    assert_equal "none", data["flame"]
    assert dom.include?(NOT_RECORDED), dom[%r{<h2>Where the waiting.*?</div>}m]
  end
end
