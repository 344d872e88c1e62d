# frozen_string_literal: true

# How long `gvlscope report` takes on a big trace (target: 3,000,000 events in <= 5 s), and how
# fast the HTML report's timeline draws in headless Chromium.
#
#   bundle exec ruby bench/report.rb                 # makes tmp/bench-report.gvl (~3M events) first
#   TRACE=big.gvl bundle exec ruby bench/report.rb   # an existing trace
#
# The workload: 4 threads each doing short blocking reads of /dev/zero, so the GVL changes
# hands all the time (3 events per read, thousands of hand-offs between threads).
$LOAD_PATH.unshift File.expand_path("../lib", __dir__)
require "rbconfig"
require "open3"
require "fileutils"

ROOT = File.expand_path("..", __dir__)
EVENTS = Integer(ENV.fetch("EVENTS", 3_000_000))
trace = ENV["TRACE"] || File.join(ROOT, "tmp", "bench-report.gvl")

def seconds
  started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
  yield
  Process.clock_gettime(Process::CLOCK_MONOTONIC) - started
end

unless ENV["TRACE"] && File.exist?(trace)
  FileUtils.mkdir_p(File.dirname(trace))
  FileUtils.rm_f(trace) # a trace never overwrites a file
  reads_per_thread = EVENTS / 3 / 4
  code = <<~RUBY
    require "gvlscope"
    GVLScope.trace(ARGV[0]) do
      4.times.map do |n|
        Thread.new do
          Thread.current.name = "reader \#{n}"
          File.open("/dev/zero") { |zero| #{reads_per_thread}.times { zero.sysread(16) } }
        end
      end.each(&:join)
    end
  RUBY
  took = seconds { system(RbConfig.ruby, "-I#{File.join(ROOT, 'lib')}", "-e", code, trace, exception: true) }
  warn format("wrote %s in %.1f s", trace, took)
end

gvlscope = [RbConfig.ruby, File.join(ROOT, "exe", "gvlscope")]
html = File.expand_path(trace.sub(/\.gvl\z/, "") + ".html")
text_s = seconds { system(*gvlscope, "report", trace, out: File::NULL, exception: true) }
html_s = seconds { system(*gvlscope, "report", trace, "--html", html, out: File::NULL, err: File::NULL, exception: true) }

# The parts, in this process with YJIT (as exe/gvlscope runs).
RubyVM::YJIT.enable if defined?(RubyVM::YJIT.enable)
require "gvlscope/model"
require "gvlscope/analysis"
require "gvlscope/formats/report_text"
file = timeline = report = nil
read_s = seconds { file = GVLScope::Model::TraceFile.read(trace) }
timeline_s = seconds { timeline = GVLScope::Model::Timeline.new(file) }
analyse_s = seconds { report = GVLScope::Analysis::Report.new(timeline).tap(&:findings).tap(&:histograms) }
render_s = seconds { GVLScope::Formats::ReportText.new(report).to_s }
puts "Ruby #{RUBY_DESCRIPTION}; #{file.size} events, #{timeline.threads.size} threads, #{report.findings.size} findings"
puts format("gvlscope report (wall, whole command): %.2f s; with --html: %.2f s (%.1f MB)", text_s, html_s,
            File.size(html) / 1e6)
puts format("parts (YJIT): read %.2f s, timeline %.2f s, analysis %.2f s, text %.2f s", read_s, timeline_s, analyse_s,
            render_s)

chromium = %w[chromium chromium-browser].map { |name| `which #{name} 2>/dev/null`.strip }.reject(&:empty?).first
if chromium
  dom = nil
  load_s = seconds do
    dom, = Open3.capture3(chromium, "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1400,1000",
                          "--virtual-time-budget=60000", "--dump-dom", "file://#{html}")
  end
  body = dom[/<body[^>]*>/].to_s
  puts format("Chromium (headless): the report was drawn %s ms after navigation started (%.1f s wall with browser " \
              "start-up); one redraw of the whole trace %s ms; rendered=%s", body[/data-ready-ms="(\d+)"/, 1] || "?",
              load_s, body[/data-draw-ms="([\d.]+)"/, 1] || "?", body[/data-rendered="(\w+)"/, 1] || "no")
else
  puts "Chromium: not installed (apt-get install chromium), HTML not timed"
end
