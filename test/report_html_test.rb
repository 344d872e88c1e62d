# frozen_string_literal: true

require "test_helper"
require "tmpdir"
require "gvlscope/analysis"
require "gvlscope/formats/report_html"
require_relative "support/headless_chromium"

# The HTML report opened in a real headless Chromium (Debian's chromium package, which
# script/test installs): it must render without a JavaScript error and show every thread.
# A screenshot is left in tmp/report-html-test.png for people to look at.
# Run alone: bundle exec ruby -Itest test/report_html_test.rb
class ReportHTMLTest < Minitest::Test
  include GVLScopeTestHelper
  include HeadlessChromium

  def test_the_report_renders_every_thread_without_errors
    Dir.mktmpdir("gvlscope-html") do |dir|
      trace = File.join(dir, "t.gvl")
      trace_program(trace, 'GVLWorkloads.cpu_beside_reader("cpu <b>&", 4)')
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
