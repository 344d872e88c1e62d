# frozen_string_literal: true

# Wall time, CPU time and peak memory of `gvlscope report` (text, --json, --html) and `gvlscope
# export` (perfetto, chrome-json) on traces of 1M, 10M and 100M events: the targets of issue 18
# (docs/performance.md has the table, the machine and the Ruby).
#
#   bundle exec ruby bench/report.rb                       # EVENTS=1000000,10000000
#   EVENTS=100000000 bundle exec ruby bench/report.rb      # ~1 GB of trace, ~10 GB of Chrome JSON
#   SOURCE=recorded EVENTS=10000000 bundle exec ruby bench/report.rb
#   TRACE=big.gvl bundle exec ruby bench/report.rb         # an existing trace
#   BEFORE=/path/to/old/checkout bundle exec ruby bench/report.rb   # the same commands of another
#                                                           # checkout, on the same traces
#   ONLY=report,json bundle exec ruby bench/report.rb      # some of the commands
#   FINDINGS=20 ONLY=report,html bundle exec ruby bench/report.rb   # 20 made-up findings in each report
#                                                           # (bench/support/made_up_findings.rb): the HTML's windows
#
# SOURCE=synthetic (the default) writes the traces with test/support/synthetic_trace.rb: 4
# threads handing the GVL to each other every ~2 us (the hand-off thrash), with release sites, GC
# and holder samples, ~10.7 bytes per event. SOURCE=recorded traces a real program instead: 4
# threads doing short blocking reads of /dev/zero (3 events per read; ~10 s for 10M events).
#
# Each command runs in its own process under /usr/bin/time (peak RSS is the process's maximum
# resident set); exports are written to tmp/ and deleted after their size is noted.
$LOAD_PATH.unshift File.expand_path("../lib", __dir__)
$LOAD_PATH.unshift File.expand_path("../test", __dir__)
require "rbconfig"
require "fileutils"
require "support/synthetic_trace"

ROOT = File.expand_path("..", __dir__)
TMP = File.join(ROOT, "tmp")
SIZES = ENV["TRACE"] ? [nil] : ENV.fetch("EVENTS", "1000000,10000000").split(",").map { |count| Integer(count.delete("_")) }
SOURCE = ENV.fetch("SOURCE", "synthetic")
TIME = "/usr/bin/time"
abort "bench/report.rb needs GNU time (apt-get install time)" unless File.executable?(TIME)

COMMANDS = {
  "report" => ->(trace) { ["report", trace] },
  "json" => ->(trace) { ["report", trace, "--json"] },
  "html" => ->(trace) { ["report", trace, "--html", File.join(TMP, "bench.html")] },
  "perfetto" => ->(trace) { ["export", trace, "--format", "perfetto", "-o", File.join(TMP, "bench.pftrace")] },
  "chrome" => ->(trace) { ["export", trace, "--format", "chrome-json", "-o", File.join(TMP, "bench.json")] },
}.freeze
ONLY = ENV["ONLY"]&.split(",") || COMMANDS.keys

def record(path, events)
  reads = events / 3 / 4
  code = <<~RUBY
    require "gvlscope"
    GVLScope.trace(ARGV[0]) do
      4.times.map do |n|
        Thread.new do
          Thread.current.name = "reader \#{n}"
          File.open("/dev/zero") { |zero| #{reads}.times { zero.sysread(16) } }
        end
      end.each(&:join)
    end
  RUBY
  system(RbConfig.ruby, "-I#{File.join(ROOT, 'lib')}", "-e", code, path, exception: true)
end

def trace_for(events)
  return ENV["TRACE"] if ENV["TRACE"]

  path = File.join(TMP, "bench-#{SOURCE}-#{events}.gvl")
  return path if File.exist?(path)

  FileUtils.mkdir_p(TMP)
  started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
  SOURCE == "recorded" ? record(path, events) : SyntheticTrace.write(path, events: events)
  warn format("wrote %s (%.0f MB) in %.1f s", path, File.size(path) / 1e6, Process.clock_gettime(Process::CLOCK_MONOTONIC) - started)
  path
end

# [wall s, CPU s (user + system), peak RSS MB, output MB] of one command of the checkout at +root+.
def measure(root, arguments)
  outputs = arguments.grep(%r{\A#{Regexp.escape(TMP)}/bench\.})
  FileUtils.rm_f(outputs)
  stats = File.join(TMP, "bench-time.txt")
  findings = ENV["FINDINGS"] ? ["-I", File.join(root, "lib"), "-r", File.join(ROOT, "bench/support/made_up_findings.rb")] : []
  ok = system(TIME, "-o", stats, "-f", "%e %U %S %M", RbConfig.ruby, *findings, File.join(root, "exe", "gvlscope"), *arguments,
              out: File::NULL, err: File::NULL)
  wall, user, system_s, rss_kb = File.read(stats).split.last(4).map(&:to_f)
  size = outputs.sum { |path| File.exist?(path) ? File.size(path) : 0 }
  FileUtils.rm_f(outputs)
  ok ? [wall, user + system_s, rss_kb / 1024, size / 1e6] : nil
end

def events_of(trace)
  require "gvlscope/model"
  file = GVLScope::Model::Scan.read(trace)
  GVLScope::Model::Scan.new(file).file.size
end

checkouts = { "now" => ROOT }
checkouts["before"] = File.expand_path(ENV["BEFORE"]) if ENV["BEFORE"]
puts "Ruby #{RUBY_DESCRIPTION}; #{`nproc`.strip} CPUs; load average #{File.read('/proc/loadavg').split.first(3).join(' ')}"
puts
puts "| trace | events | command | checkout | wall s | CPU s | peak RSS MB | output MB | events/s (wall) |"
puts "|---|---:|---|---|---:|---:|---:|---:|---:|"
SIZES.each do |wanted|
  trace = trace_for(wanted)
  events = events_of(trace)
  ONLY.each do |name|
    checkouts.each do |checkout, root|
      wall, cpu, rss, size = measure(root, COMMANDS.fetch(name).call(trace))
      if wall.nil?
        puts "| #{File.basename(trace)} | #{events} | #{name} | #{checkout} | failed | | | | |"
        next
      end
      puts format("| %s (%.0f MB) | %d | %s | %s | %.2f | %.2f | %.0f | %s | %s |", File.basename(trace), File.size(trace) / 1e6,
                  events, name, checkout, wall, cpu, rss, size.positive? ? format("%.1f", size) : "-",
                  format("%.1fM", events / wall / 1e6))
      $stdout.flush
    end
  end
end
