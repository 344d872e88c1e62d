# frozen_string_literal: true

# Instructions per fiber switch on an event loop's thread (ext/gvlscope/fibers.c), counted by
# valgrind (callgrind): a thread with a Fiber scheduler resumes a task SWITCHES / 2 times (each
# round trip is two switches: the loop's resume, the task's yield), in a fresh Ruby per mode.
#
#   bundle exec ruby -Ilib bench/fiber_instructions.rb          (SWITCHES=200000 by default)
require "rbconfig"
require_relative "support/callgrind"

SWITCHES = Integer(ENV.fetch("SWITCHES", 200_000))
LIB = File.expand_path("../lib", __dir__)
SCHEDULER = File.expand_path("../lab/tiny_scheduler.rb", __dir__)
# mode => [set-up, the task's first statement, the mode its extra is counted over]
MODES = {
  "none" => ["", "", nil],
  "metrics" => ["GVLScope::Metrics.enable", "", "none"],
  "metrics+loops" => ["GVLScope::Metrics.enable; GVLScope::EventLoops.track", "", "metrics"],
  # A trace records each turn too (TURN_BEGIN, its ARG, TURN_END: 24 bytes per round trip); its
  # turns are short, so no stack is read.
  "metrics+loops+trace" => ["GVLScope::Metrics.enable; GVLScope::EventLoops.track; " \
                            "GVLScope.start(File.join(Dir.mktmpdir, 't.gvl'), fibers: true); at_exit { GVLScope.stop }",
                            "", "metrics+loops"],
  # A request in progress on the task (as GVLScope::Rack's under Falcon): each switch of its fiber
  # closes or opens one of its own stretches (the thread's counters read once).
  "metrics+loops+request" => ["GVLScope::Metrics.enable; GVLScope::Native.loop_requests = true",
                              "timing = GVLScope::RequestTiming.start", "metrics+loops"],
}.freeze
Callgrind.require!
totals = MODES.to_h do |mode, (setup, in_task)|
  script = <<~RUBY
    require "gvlscope"
    require "tmpdir"
    require #{SCHEDULER.inspect}
    #{setup}
    Thread.new do
      Fiber.set_scheduler(TinyScheduler.new)
      task = Fiber.new(blocking: false) { #{in_task}; loop { Fiber.yield } }
      #{SWITCHES / 2}.times { task.resume }
    end.join
  RUBY
  total = Callgrind.instructions(RbConfig.ruby, "-I", LIB, "-e", script)
  $stderr.puts "#{mode}: #{total} instructions"
  [mode, total]
end

puts "Ruby #{RUBY_DESCRIPTION}; #{SWITCHES} fiber switches on a loop's thread under callgrind"
puts
puts "| mode | instructions | extra per switch | over |"
puts "|---|---:|---:|---|"
MODES.each do |mode, (_setup, _in_task, base)|
  extra = base ? format("%.0f", (totals[mode] - totals[base]).fdiv(SWITCHES)) : "-"
  puts "| #{mode} | #{totals[mode]} | #{extra} | #{base || '-'} |"
end
