# frozen_string_literal: true

# `gvlscope report TRACE --html OUT` on a synthetic trace (test/support/synthetic_trace.rb), in
# this process: wall and CPU time of the whole command, the engine's passes over the trace
# (Model::Scan#passes: the index, the main pass, then those that fetch the page's intervals) and
# the page's size; then the same with `--window FROM..TO` (detail on demand). docs/performance.md
# has the numbers.
#
# The synthetic trace has no finding, so FINDINGS (20: as many windows as the page has) made-up
# ones are added to the report's, spread over the trace, each focused on FOCUS_MS (20 ms: more
# intervals around it than its share of the page, so every window is fetched again narrower).
#
#   bundle exec ruby bench/report_html_passes.rb                  # 10M events
#   EVENTS=1000000 FINDINGS=0 WINDOW=0.1s..0.2s bundle exec ruby bench/report_html_passes.rb
#   LIB=/path/to/other/checkout/lib bundle exec ruby bench/report_html_passes.rb   # another checkout
#
# LIB: an older checkout counts its passes by Model::Scan#run_pass, wrapped here.
ROOT = File.expand_path("..", __dir__)
$LOAD_PATH.unshift ENV.fetch("LIB", File.join(ROOT, "lib"))
$LOAD_PATH.unshift File.join(ROOT, "test")
require "fileutils"
require "stringio"
require "json"
require "gvlscope"
require "gvlscope/cli"
require "gvlscope/model"
require "support/synthetic_trace"

EVENTS = Integer(ENV.fetch("EVENTS", "10000000").delete("_"))
TMP = File.join(ROOT, "tmp")
FileUtils.mkdir_p(TMP)
trace = File.join(TMP, "bench-synthetic-#{EVENTS}.gvl")
SyntheticTrace.write(trace, events: EVENTS) unless File.exist?(trace)

# Counts Engine::Pass creations whatever the checkout (one per pass over the events).
module CountPasses
  def run_pass(...)
    (@counted_passes ||= 0)
    @counted_passes += 1
    super
  end

  def counted_passes = @counted_passes.to_i
end
GVLScope::Model::Scan.prepend(CountPasses)

FINDINGS = Integer(ENV.fetch("FINDINGS", "20"))
FOCUS_NS = (Float(ENV.fetch("FOCUS_MS", "20")) * 1e6).to_i
require "gvlscope/analysis"
GVLScope::Analysis::Report.prepend(Module.new do
  define_method(:findings) do
    @made_up ||= super() + (1..FINDINGS).map do |index|
      at = duration_ns / (FINDINGS + 1) * index
      GVLScope::Analysis::Finding.new(kind: :convoy, about: ["worker 1"], threads: ["worker 1"], title: "made up #{index}",
                                      evidence: {}, fix: "-", focus_ns: [at, at + FOCUS_NS], explains_wait_ns: 0, wait_share: 0.0)
    end
  end
end)

scans = []
GVLScope::Model::Scan.singleton_class.prepend(Module.new do
  define_method(:new) { |*args, **options, &block| super(*args, **options, &block).tap { |scan| scans << scan } }
end)

def run(arguments, scans)
  scans.clear
  out = StringIO.new
  err = StringIO.new
  clock = Process.clock_gettime(Process::CLOCK_MONOTONIC)
  cpu = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID)
  status = GVLScope::CLI.new(out: out, err: err).run(arguments)
  abort "gvlscope #{arguments.join(' ')}: exit #{status}: #{err.string}" unless status.zero?
  [Process.clock_gettime(Process::CLOCK_MONOTONIC) - clock, Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID) - cpu,
   scans.sum(&:counted_passes)]
end

puts "Ruby #{RUBY_DESCRIPTION}; #{$LOADED_FEATURES.grep(%r{gvlscope/formats/report_html.rb}).first}"
puts format("trace %s: %d MB", trace, File.size(trace) / 1_000_000)
pages = { File.join(TMP, "bench-passes.html") => [], File.join(TMP, "bench-passes-window.html") => ["--window", ENV.fetch("WINDOW", "0.5s..0.51s")] }
pages.each do |html, extra|
  arguments = ["report", trace, "--html", html, *extra]
  next if arguments.include?("--window") && ENV["LIB"] && !File.read(File.join(ENV["LIB"], "gvlscope/cli.rb")).include?("--window")

  FileUtils.rm_f(html) # this script's page of a run before: `report --html` replaces no file

  GC.start
  wall, cpu, passes = run(arguments, scans)
  data = JSON.parse(File.read(html)[/^const REPORT = (.*);$/, 1])
  # The process's peak RSS so far: the first page's is its command's (this process made the trace first, if it had to).
  peak_mb = File.read("/proc/self/status")[/^VmHWM:\s+(\d+)/, 1].to_i / 1024
  puts format("gvlscope %-70s %.2f s wall, %.2f s CPU, %d engine passes (the main one included), page %.1f MB, " \
              "%d intervals in %d windows; peak RSS so far %d MB", arguments.join(" ").gsub("#{ROOT}/", ""), wall, cpu, passes,
              File.size(html) / 1e6, data["timeline"]["intervals"], data["timeline"]["windows"].size, peak_mb)
end
