# frozen_string_literal: true

# Instructions per GVL event, counted by valgrind (callgrind): unlike time, the same on a busy or
# idle machine. Runs the sysread workload (CALLS calls, 3 GVL events each) in a fresh Ruby under
# callgrind once per mode and reports each mode's extra instructions per event over "none".
#
#   BUNDLE_GEMFILE=bench/Gemfile bundle exec ruby -Ilib bench/instructions.rb
#   (needs valgrind: apt-get install valgrind; the gvltools row needs the bench bundle)
require "rbconfig"
require "tmpdir"
require_relative "support/callgrind"

CALLS = Integer(ENV.fetch("CALLS", 100_000))
LIB = File.expand_path("../lib", __dir__)
MODES = {
  "none" => "",
  "empty-hook" => "GVLScope::Native.probe_start",
  "metrics" => "GVLScope::Metrics.enable",
  "trace" => "GVLScope.start(File.join(dir, 't.gvl'), stacks: false)",
  "trace+stacks" => "GVLScope.start(File.join(dir, 't.gvl'))",
  # The loops' turns recorded too: this thread has no loop, its releases still have no site to read.
  "trace+stacks+fibers" => "GVLScope.start(File.join(dir, 't.gvl'), fibers: true)",
  "metrics+trace" => "GVLScope::Metrics.enable; GVLScope.start(File.join(dir, 't.gvl'), stacks: false)",
}
begin
  require "gvltools"
  MODES["gvltools"] = 'require "gvltools"; [GVLTools::GlobalTimer, GVLTools::LocalTimer, GVLTools::WaitingThreads].each(&:enable)'
rescue LoadError
  warn "gvltools not installed: its row is skipped"
end
MODES.freeze

Callgrind.require!

totals = Dir.mktmpdir("gvlscope-instructions") do |dir|
  MODES.to_h do |mode, setup|
    script = <<~RUBY
      require "gvlscope"
      dir = #{File.join(dir, mode).tap { |d| Dir.mkdir(d) }.inspect}  # a file per mode: traces never overwrite
      #{setup}
      File.open("/dev/zero") { |zero| #{CALLS}.times { zero.sysread(16) } }
    RUBY
    total = Callgrind.instructions(RbConfig.ruby, "-I", LIB, "-e", script)
    $stderr.puts "#{mode}: #{total} instructions"
    [mode, total]
  end
end

events = CALLS * 3
puts "Ruby #{RUBY_DESCRIPTION}; #{CALLS} sysread calls (#{events} GVL events) under callgrind"
puts
puts "| mode | instructions | extra per event |"
puts "|---|---:|---:|"
totals.each do |mode, total|
  extra = mode == "none" ? "-" : format("%.0f", (total - totals["none"]).fdiv(events))
  puts "| #{mode} | #{total} | #{extra} |"
end
