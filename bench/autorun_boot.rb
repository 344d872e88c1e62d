# frozen_string_literal: true

# What autorun adds to the start and exit of a Ruby process (what `gvlscope run` puts in every
# process's RUBYOPT): the CPU time (user + system) of `ruby -e 1` with and without
# -rgvlscope/autorun, tracing (the default, with stacks) and with --metrics-only, paired run by
# run (a neighbour's burst hits all three alike), the median of each difference.
#
#   bundle exec ruby bench/autorun_boot.rb            # RUNS=40
#
# Each process writes its trace (or metrics) into a temporary directory, as under `gvlscope run`.
require "rbconfig"
require "tmpdir"

LIB = File.expand_path("../lib", __dir__)
RUNS = Integer(ENV.fetch("RUNS", "40"))
CLEAN = %w[RUBYOPT RUBYLIB BUNDLE_GEMFILE BUNDLER_SETUP BUNDLE_BIN_PATH].to_h { |name| [name, nil] }.freeze

# CPU seconds of one child process.
def cpu_of(env, *args)
  before = Process.times
  system(CLEAN.merge(env), RbConfig.ruby, *args, exception: true)
  after = Process.times
  (after.cutime + after.cstime) - (before.cutime + before.cstime)
end

def median(values) = values.sort[values.size / 2]

setups = {
  "plain" => ->(_dir) { [{}, "-e", "1"] },
  "autorun, trace" => ->(dir) { [{ "GVLSCOPE_RUN_DIR" => dir, "GVLSCOPE_OUTPUT" => File.join(dir, "t-%p.gvl") }, "-I", LIB, "-rgvlscope/autorun", "-e", "1"] },
  "autorun, --metrics-only" => ->(dir) { [{ "GVLSCOPE_RUN_DIR" => dir, "GVLSCOPE_METRICS_ONLY" => "1" }, "-I", LIB, "-rgvlscope/autorun", "-e", "1"] },
}
times = setups.keys.to_h { |name| [name, []] }
Dir.mktmpdir("gvlscope-boot") do |dir|
  RUNS.times do
    setups.each { |name, setup| times[name] << cpu_of(*setup.call(dir)) }
    Dir.children(dir).each { |file| File.delete(File.join(dir, file)) }
  end
end
puts "Ruby #{RUBY_DESCRIPTION}; #{RUNS} runs of each; load average #{File.read('/proc/loadavg').split.first(3).join(' ')}"
plain = times["plain"]
times.each do |name, values|
  added = values.zip(plain).map { |value, base| value - base }
  puts format("%-24s %5.1f ms CPU (median)%s", name, median(values) * 1000,
              name == "plain" ? "" : format(", %+.1f ms over plain (median of the paired differences)", median(added) * 1000))
end
