# frozen_string_literal: true

require "test_helper"
require "tmpdir"
require "gvlscope/analysis"
require "gvlscope/formats/report_html"

# The HTML report opened in a real headless Chromium (Debian's chromium package, which
# script/test installs): it must render without a JavaScript error and show every thread.
# A screenshot is left in tmp/report-html-test.png for people to look at.
# Run alone: bundle exec ruby -Itest test/report_html_test.rb
class ReportHTMLTest < Minitest::Test
  include GVLScopeTestHelper

  CHROMIUM = %w[chromium chromium-browser google-chrome].flat_map do |name|
    ENV.fetch("PATH", "").split(File::PATH_SEPARATOR).map { |dir| File.join(dir, name) }
  end.find { |path| File.executable?(path) }

  def chromium(*args, url)
    unless CHROMIUM
      skip "no chromium" if ENV["GVLSCOPE_SKIP_BROWSER"] == "1"
      flunk "headless Chromium is needed: apt-get install chromium (script/test installs it), " \
            "or GVLSCOPE_SKIP_BROWSER=1 to skip"
    end
    # --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start.
    Open3.capture3(CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                   "--window-size=1400,1000", *args, url)
  end

  def test_the_report_renders_every_thread_without_errors
    Dir.mktmpdir("gvlscope-html") do |dir|
      trace = File.join(dir, "t.gvl")
      _out, err, status = run_ruby(<<~RUBY, trace)
        require "gvlscope"
        GVLScope.trace(ARGV[0]) do
          cpu = Thread.new { Thread.current.name = "cpu <b>&"; x = 0; x += 1 until Thread.current[:stop] }
          r, w = IO.pipe
          reader = Thread.new { Thread.current.name = "reader"; 4.times { r.read(1) } }
          4.times { w.write("x"); sleep 0.01 }
          reader.join
          cpu[:stop] = true
          cpu.join
        end
      RUBY
      assert status.success?, err
      report = GVLScope::Analysis::Report.new(GVLScope::Model.timeline(trace))
      html = File.join(dir, "report.html")
      File.open(html, "w") { |io| GVLScope::Formats::ReportHTML.new(report).write(io) }
      refute_match(%r{https?://}, File.read(html), "the report must not load anything from the network")

      dom, log, status = chromium("--virtual-time-budget=10000", "--dump-dom", "file://#{html}")
      assert status.success?, log
      body = dom[/<body[^>]*>/]
      assert_match(/data-rendered="ok"/, body, "the viewer did not finish drawing:\n#{log}")
      refute_match(/data-errors/, body, "JavaScript errors: #{body}")
      refute_match(/Uncaught/, log)
      assert_equal report.timeline.threads.size.to_s, body[/data-lanes="(\d+)"/, 1]
      assert_operator body[/data-rectangles="(\d+)"/, 1].to_i, :>=, report.timeline.threads.size
      report.timeline.threads.each_value do |thread|
        escaped = thread.label.gsub("&", "&amp;").gsub("<", "&lt;").gsub(">", "&gt;")
        assert_includes dom, escaped, "thread #{thread.label} is missing from the page"
      end
      report.findings.each { |finding| assert_includes dom, finding.title.gsub("&", "&amp;").gsub("<", "&lt;").gsub(">", "&gt;") }

      FileUtils.mkdir_p(File.join(ROOT, "tmp"))
      screenshot = File.join(ROOT, "tmp", "report-html-test.png")
      _out, log, status = chromium("--virtual-time-budget=10000", "--screenshot=#{screenshot}", "file://#{html}")
      assert status.success?, log
      assert_operator File.size(screenshot), :>, 10_000
    end
  end
end
