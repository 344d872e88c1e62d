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
  # The same calls made by a loop's task in its turn (IN_A_TASK): each release's site is read, as a
  # blocking call there stalls the loop (docs/fibers.md).
  "trace+stacks+fibers, in a task" => "GVLScope.start(File.join(dir, 't.gvl'), fibers: true)",
  "metrics+trace" => "GVLScope::Metrics.enable; GVLScope.start(File.join(dir, 't.gvl'), stacks: false)",
}
begin
  require "gvltools"
  MODES["gvltools"] = 'require "gvltools"; [GVLTools::GlobalTimer, GVLTools::LocalTimer, GVLTools::WaitingThreads].each(&:enable)'
rescue LoadError
  warn "gvltools not installed: its row is skipped"
end
MODES.freeze
IN_A_TASK = ["trace+stacks+fibers, in a task"].freeze
SCHEDULER = File.expand_path("../lab/tiny_scheduler.rb", __dir__)

Callgrind.require!

totals = Dir.mktmpdir("gvlscope-instructions") do |dir|
  MODES.to_h do |mode, setup|
    work = "File.open('/dev/zero') { |zero| #{CALLS}.times { zero.sysread(16) } }"
    # One turn of one task: /dev/zero never makes it wait, so it never gives the loop back.
    work = "Thread.new { Fiber.set_scheduler(TinyScheduler.new); Fiber.schedule { #{work} } }.join" if IN_A_TASK.include?(mode)
    script = <<~RUBY
      require "gvlscope"
      require #{SCHEDULER.inspect}
      dir = #{File.join(dir, mode.tr(' ,', '_')).tap { |d| Dir.mkdir(d) }.inspect}  # a file per mode: traces never overwrite
      #{setup}
      #{work}
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
