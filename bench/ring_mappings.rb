# frozen_string_literal: true

# Memory mappings left by exited M:N threads (docs/performance.md, "Many threads"). The lab's full
# ring (lab/ring.rb) runs rings of 1,000 and 10,000 threads, then one of 100,000. Here each mode
# runs in a child Ruby with RUBY_MN_THREADS=1, as `gvlscope lab run ring --mn` does (traced:
# recorder loaded at boot, 1024 MB buffer, stacks on): the first two rings, two GCs, then a third
# of THIRD threads, and prints how many mappings (/proc/self/maps lines) the third ring added while
# all its threads were alive (without the GC, whether the second ring's Thread objects were
# collected before the third ring's stacks are mapped depends on when a GC happens to run). When THIRD threads do not fit under vm.max_map_count, CRuby dies
# ("[FATAL] failed to allocate memory"): the child prints its count of live threads every 500,
# and the last one printed is how many threads of the third ring ran.
#
#   bundle exec ruby -Ilib bench/ring_mappings.rb                  (THIRD=10000)
#   THIRD=100000 bundle exec ruby -Ilib bench/ring_mappings.rb     (how many fit)
require "open3"
require "rbconfig"
require "tmpdir"
require_relative "../lib/gvlscope/integrations/launch"

THIRD = Integer(ENV.fetch("THIRD", 10_000))
FIRST, SECOND = ENV.fetch("RINGS", "1000,10000").split(",").map { |count| Integer(count) } # RINGS=50,100: a smoke run
RING = File.expand_path("../lab/thread_ring", __dir__)

CHILD = <<~RUBY
  $stdout.sync = true
  require #{RING.inspect}
  def maps = File.foreach("/proc/self/maps").count

  # The lab's ring (lab/thread_ring.rb); the block runs while all its threads are alive.
  def ring(count, progress: false)
    ring = ThreadRing.new(count) { |i| puts "alive \#{i}" if progress && (i % 500).zero? }
    yield if block_given?
    ring.lap(3)
    ring.close
  end

  # Each ring from a thread of its own: a stale pointer to a finished ring on the main thread's
  # stack (CRuby scans it conservatively; every thread's block holds the ring's Array) would keep
  # all of its threads for a few more GCs, traced or not, however many GCs run here.
  Thread.new { ring(#{FIRST}) }.join
  Thread.new { ring(#{SECOND}) }.join
  2.times { GC.start } # what a program that allocates soon does
  puts "threads after GC \#{ObjectSpace.each_object(Thread).count}"
  before = maps
  ring(#{THIRD}, progress: true) { puts "added \#{maps - before}" }
RUBY

MODES = {
  "untraced" => ->(_output) { {} },
  "metrics" => ->(output) { GVLScope::Launch.environment(output: output, metrics_only: true) },
  "traced" => ->(output) { GVLScope::Launch.environment(output: output, buffer_mb: 1024) },
}.freeze

max_map_count = File.read("/proc/sys/vm/max_map_count").to_i
puts "Ruby #{RUBY_VERSION}, RUBY_MN_THREADS=1, vm.max_map_count = #{max_map_count}; " \
     "rings of #{FIRST} and #{SECOND} threads, then #{THIRD}"
puts
puts "| mode | Thread objects left after the first two rings and a GC | third ring: threads alive | mappings it added |"
puts "|---|---:|---:|---:|"
Dir.mktmpdir("gvlscope-ring-mappings") do |dir|
  MODES.each do |mode, launch|
    env = launch.(File.join(dir, "#{mode}-%p.gvl")).merge("RUBY_MN_THREADS" => "1")
    out, err, status = Open3.capture3(env, RbConfig.ruby, "-e", CHILD)
    left = out[/^threads after GC (\d+)/, 1]
    alive = out.scan(/^alive (\d+)/).flatten.last.to_i
    added = out[/^added (\d+)/, 1]
    # How CRuby fails at the cap: Thread.new raises, or it dies ("[FATAL] failed to allocate memory").
    failure = err[/can't create Thread: [^(\n]*/] || err[/\[FATAL\][^\n]*/] || (status.success? ? nil : status.inspect)
    alive = THIRD if added
    puts "| #{mode} | #{left} | #{alive}#{failure ? " (then #{failure.strip})" : ''} | #{added || '-'} |"
    Dir.glob(File.join(dir, "*.gvl")).each { |path| File.delete(path) }
  end
end
