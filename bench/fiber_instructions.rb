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
MODES = {
  "none" => "",
  "metrics" => "GVLScope::Metrics.enable",
  "metrics+loops" => "GVLScope::Metrics.enable; GVLScope::EventLoops.track",
  # A trace records each turn too (TURN_BEGIN, its ARG, TURN_END: 24 bytes per round trip); its
  # turns are short, so no stack is read.
  "metrics+loops+trace" => "GVLScope::Metrics.enable; GVLScope::EventLoops.track; " \
                           "GVLScope.start(File.join(Dir.mktmpdir, 't.gvl'), fibers: true); at_exit { GVLScope.stop }",
}.freeze

Callgrind.require!
totals = MODES.to_h do |mode, setup|
  script = <<~RUBY
    require "gvlscope"
    require "tmpdir"
    require #{SCHEDULER.inspect}
    #{setup}
    Thread.new do
      Fiber.set_scheduler(TinyScheduler.new)
      task = Fiber.new(blocking: false) { loop { Fiber.yield } }
      #{SWITCHES / 2}.times { task.resume }
    end.join
  RUBY
  total = Callgrind.instructions(RbConfig.ruby, "-I", LIB, "-e", script)
  $stderr.puts "#{mode}: #{total} instructions"
  [mode, total]
end

puts "Ruby #{RUBY_DESCRIPTION}; #{SWITCHES} fiber switches on a loop's thread under callgrind"
puts
puts "| mode | instructions | extra per switch over the previous row |"
puts "|---|---:|---:|"
MODES.keys.each_with_index do |mode, index|
  extra = index.zero? ? "-" : format("%.0f", (totals[mode] - totals[MODES.keys[index - 1]]).fdiv(SWITCHES))
  puts "| #{mode} | #{totals[mode]} | #{extra} |"
end
