# frozen_string_literal: true

# Issue 37's fuzz: mutated traces (byte flips, cuts, bogus headers and chunk headers of the
# recorded fixtures) and mutated snapshot files and /metrics scrapes through every command that
# reads them (report in every format and --html, export in every format, summary, advise, diff),
# in this process as exe/gvlscope runs them (test/support/cli_fuzz.rb). Prints the runs, their
# exit statuses and every command that printed "internal error" or a backtrace, or left a
# temporary file; exits 1 if any did.
#
#   bundle exec ruby bench/fuzz_cli.rb                    # TRACES=1000 SNAPSHOTS=1200 SEED=37
#   TRACES=20 SNAPSHOTS=20 SEED=5 bundle exec ruby bench/fuzz_cli.rb
#
# The full run on Ruby 3.3.8 (this 2-core VM, under other work): 15,000 commands on traces in 39 s
# and 3,600 on snapshots in 121 s, 0 internal errors (docs/reliability.md, issue 37).
$LOAD_PATH.unshift File.expand_path("../lib", __dir__)
$LOAD_PATH.unshift File.expand_path("../test", __dir__)
require "tmpdir"
require "support/cli_fuzz"

traces = Integer(ENV.fetch("TRACES", "1000"))
snapshots = Integer(ENV.fetch("SNAPSHOTS", "1200"))
seed = Integer(ENV.fetch("SEED", "37"))
keep = ENV.fetch("KEEP", nil) # a directory to keep the inputs in (the failing ones are named below)

Dir.mktmpdir("gvlscope-fuzz-cli") do |tmp|
  dir = keep ? File.expand_path(keep).tap { |path| Dir.mkdir(path) } : tmp
  fuzz = CLIFuzz.new(dir: dir, seed: seed)
  rows = [["traces", traces, -> { fuzz.traces(traces) }], ["snapshots", snapshots, -> { fuzz.snapshots(snapshots) }]].map do |name, count, work|
    runs = fuzz.runs
    failures = fuzz.failures.size
    started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    work.call
    [name, count, fuzz.runs - runs, fuzz.failures.size - failures, Process.clock_gettime(Process::CLOCK_MONOTONIC) - started]
  end
  puts "Ruby #{RUBY_VERSION}, seed #{seed}", ""
  puts "| inputs | mutated | commands run | internal errors | seconds |", "|---|---:|---:|---:|---:|"
  rows.each { |name, count, runs, failed, seconds| puts format("| %s | %d | %d | %d | %.0f |", name, count, runs, failed, seconds) }
  puts "", "exit statuses: #{fuzz.statuses.sort.map { |status, n| "#{status}: #{n}" }.join(', ')}"
  fuzz.failures.each { |failure| puts "", "#{failure.input}:", failure.to_s }
  exit(fuzz.failures.empty? ? 0 : 1)
end
