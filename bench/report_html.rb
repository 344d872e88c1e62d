# frozen_string_literal: true

# The HTML report of a trace too big to record here: how big the page is and how soon headless
# Chromium has drawn it (issue #18: <= 25 MB, open in <= 3 s for a 100M-event trace).
#
#   bundle exec ruby bench/report_html.rb                      # 100M events, 2,000 threads
#   THREADS=8 EVENTS=10000000 bundle exec ruby bench/report_html.rb
#
# The report is test/support/synthetic_report.rb: rows, findings, overview and intervals made up
# at that size (every window around a finding fuller than the page takes), so what is measured is
# the page and the viewer, not reading a trace (bench/report.rb times that on a real one).
$LOAD_PATH.unshift File.expand_path("../lib", __dir__)
require "open3"
require "fileutils"
require_relative "../test/support/synthetic_report"
require "gvlscope/formats/report_html"
require "gvlscope/support/units"

ROOT = File.expand_path("..", __dir__)
THREADS = Integer(ENV.fetch("THREADS", 2_000))
EVENTS = Integer(ENV.fetch("EVENTS", 100_000_000))
RUNS = Integer(ENV.fetch("RUNS", 5))

def seconds
  started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
  yield
  Process.clock_gettime(Process::CLOCK_MONOTONIC) - started
end


html = File.join(ROOT, "tmp", "bench-report-html.html")
FileUtils.mkdir_p(File.dirname(html))
report = SyntheticReport.new(threads: THREADS, events: EVENTS)
cpu_before = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID)
build_s = seconds { File.open(html, "w") { |io| GVLScope::Formats::ReportHTML.new(report).write(io) } }
build_cpu_s = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID) - cpu_before
data = JSON.parse(File.read(html)[/^const REPORT = (.*);$/, 1])
timeline = data["timeline"]
puts "Ruby #{RUBY_DESCRIPTION}"
puts format("synthetic report: %d events, %d threads, %d findings; page %.1f MB (%s mode, %d lanes, %d intervals in " \
            "%d windows, %d bins), built in %.1f s (%.1f s of CPU; making up the report's intervals included)", EVENTS,
            THREADS, report.findings.size, File.size(html) / 1e6, timeline["mode"], data["threads"].size,
            timeline["intervals"], timeline["windows"].size, timeline["bins"].to_i, build_s, build_cpu_s)

chromium = %w[chromium chromium-browser].map { |name| `which #{name} 2>/dev/null`.strip }.reject(&:empty?).first
abort "Chromium: not installed (apt-get install chromium), the page not timed" unless chromium

# The page, and the page that then follows a finding's link (its window drawn from intervals).
clicked = html.sub(".html", "-click.html")
File.write(clicked, File.read(html).sub("</body>", <<~HTML))
  <script>
  window.addEventListener("hashchange", () => { document.body.dataset.zoomMs = document.body.dataset.drawMs; });
  document.querySelectorAll("#findings .finding")[3].querySelector("a").click();
  </script></body>
HTML
# A blank page, for the CPU time of Chromium itself (start-up and exit): the page's own CPU time
# is the difference, which other work on the machine changes far less than the wall times.
blank = html.sub(".html", "-blank.html")
File.write(blank, '<!DOCTYPE html><body><script>document.body.dataset.rendered = "ok";</script></body>')
runs = [html, clicked, blank].to_h do |page|
  measured = Array.new(RUNS) do
    dom = nil
    cpu_before = Process.times.then { |times| times.cutime + times.cstime }
    wall = seconds do
      dom, = Open3.capture3(chromium, "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1400,1000",
                            "--virtual-time-budget=60000", "--dump-dom", "file://#{page}")
    end
    cpu = Process.times.then { |times| times.cutime + times.cstime } - cpu_before
    body = dom[/<body[^>]*>/].to_s
    abort "the page did not render: #{body}" unless body.include?('data-rendered="ok"') && !body.include?("data-errors")
    { ready: body[/data-ready-ms="(\d+)"/, 1].to_i, draw: body[/data-draw-ms="([\d.]+)"/, 1].to_f,
      zoom: body[/data-zoom-ms="([\d.]+)"/, 1].to_f, wall: wall, cpu: cpu }
  end
  [page, measured]
end
opened = runs[html]
puts format("Chromium (headless, %d runs): drawn %d ms after navigation started (median; %d-%d), %.1f s wall with " \
            "browser start-up; one redraw of the whole trace %.0f ms; zoomed into a finding's window: redraw %.0f ms",
            RUNS, GVLScope::Units.median(opened.map { |run| run[:ready] }), opened.map { |run| run[:ready] }.min,
            opened.map { |run| run[:ready] }.max, GVLScope::Units.median(opened.map { |run| run[:wall] }),
            GVLScope::Units.median(opened.map { |run| run[:draw] }), GVLScope::Units.median(runs[clicked].map { |run| run[:zoom] }))
puts format("Chromium CPU time (all its processes, median): %.2f s for the page, %.2f s for a blank page: the page " \
            "costs %.2f s of CPU", GVLScope::Units.median(opened.map { |run| run[:cpu] }), GVLScope::Units.median(runs[blank].map { |run| run[:cpu] }),
            GVLScope::Units.median(opened.map { |run| run[:cpu] }) - GVLScope::Units.median(runs[blank].map { |run| run[:cpu] }))
