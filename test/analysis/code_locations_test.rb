# frozen_string_literal: true

require "test_helper"
require "json"
require "tmpdir"
require "gvlscope/analysis"
require "gvlscope/formats"
require "support/scripted_timeline"

# Code locations, on programs whose answers are known: each program is a file whose lines the
# test knows (a "# <- name" marker), traced with stacks in a child Ruby. A CPU thread runs beside
# the threads that block, so someone waits for the GVL at their releases (sites are recorded only
# then) and the timer's tick samples the holder.
class CodeLocationsTest < Minitest::Test
  include GVLScopeTestHelper

  # A CPU-bound Counter#spin beside a thread echoing through a pipe: the program of the golden
  # trace hog.gvl.
  HOG = File.read(File.join(ROOT, "test/fixtures/traces/hog.rb"))

  # The CPU thread of the other programs: keeps a waiter at every release, stops when told.
  CPU = <<~RUBY
    $stop = false
    cpu = Thread.new { x = 0; x += 1 until $stop }
  RUBY

  def line_of(program, marker) = program.lines.index { |line| line.include?("# <- #{marker}") } + 1

  # Traces +program+ (saved as prog.rb) and yields [timeline, program path].
  def trace_file(program, env: {}, stacks: true)
    Dir.mktmpdir("gvlscope-code") do |dir|
      source = File.join(dir, "prog.rb")
      File.write(source, program)
      trace = File.join(dir, "t.gvl")
      _out, err, status = run_ruby(<<~RUBY, env: env)
        require "gvlscope"
        require #{RACTOR_RESULT.inspect}
        Warning[:experimental] = false
        GVLScope.trace(#{trace.inspect}, stacks: #{stacks}) { load #{source.inspect} }
      RUBY
      assert status.success?, err
      yield GVLScope::Model.timeline(trace), source, trace
    end
  end

  def test_a_hog_beside_an_io_thread_is_named_by_method_and_line
    trace_file(HOG) do |timeline, source, trace|
      assert timeline.stacks?
      assert_consistent(timeline)
      report = GVLScope::Analysis::Report.new(timeline)
      code = report.code_locations
      echo = timeline.threads.values.find { |thread| thread.label == "echo" }
      holders = code.holders_while_waiting(echo.serial)
      refute_empty holders, "no holder sample while 'echo' waited"
      top = holders.first
      assert_equal ["Counter#spin", source, line_of(HOG, "spin")], top.frame.to_a
      assert_operator top.share, :>=, 0.8, holders.map(&:to_h).inspect

      hog = report.findings.find { |finding| finding.kind == :hog }
      refute_nil hog, report.findings.map(&:title).inspect
      assert_match(/It was in `Counter#spin` \(#{Regexp.escape(source)}:#{line_of(HOG, 'spin')}\) (8\d|9\d|100)% of the time/, hog.title)
      # The unnamed hog is labelled by where it was created.
      assert_equal "thread 2 (#{source}:#{HOG.lines.index { |l| l.start_with?('hog =') } + 1})", hog.thread

      text, err, status = gvlscope("report", trace)
      assert status.success?, err
      assert_includes text, "Where the waiting came from"
      assert_match(/\d+\.\d%  `Counter#spin` \(#{Regexp.escape(source)}:#{line_of(HOG, 'spin')}\)/, text)
    end
  end

  def test_convoy_release_sites_are_the_programs_read_and_write_lines
    trace_file(HOG) do |timeline, source|
      report = GVLScope::Analysis::Report.new(timeline)
      convoy = report.findings.find { |finding| finding.kind == :convoy && finding.thread == "echo" }
      refute_nil convoy, report.findings.map(&:title).inspect
      echo = timeline.threads.values.find { |thread| thread.label == "echo" }
      sites = report.code_locations.release_sites(threads: [echo.serial])
      named = sites.first(2).map { |row| [row.frame.label, row.frame.path, row.frame.line, row.cause] }
      assert_equal [["IO#read", source, line_of(HOG, "read"), :io], ["IO#write", source, line_of(HOG, "write"), :io]].sort,
                   named.sort, sites.map(&:to_h).inspect
      assert_includes convoy.title, "Its top release sites: `IO#"
      assert_includes convoy.title, "at #{source}:#{line_of(HOG, 'read')}"
      assert(convoy.evidence[:release_sites].any? { |site| site[:label] == "IO#read" })
    end
  end

  MUTEX = CPU + <<~RUBY
    lock = Mutex.new
    4.times.map do
      Thread.new do
        10.times do
          lock.synchronize { sleep 0.002 } # <- synchronize
        end
      end
    end.each(&:join)
    $stop = true
    cpu.join
  RUBY

  def test_mutex_contention_is_a_lock_at_the_synchronize_line
    trace_file(MUTEX) do |timeline, source|
      sites = GVLScope::Analysis::CodeLocations.new(timeline).release_sites
      locks = sites.select { |row| row.cause == :lock }
      refute_empty locks, sites.map(&:to_h).inspect
      assert(locks.all? { |row| row.frame.label.match?(/\A(Thread::)?Mutex#(lock|synchronize)\z/) }, locks.map(&:to_h).inspect)
      assert_equal [[source, line_of(MUTEX, "synchronize")]], locks.map { |row| [row.frame.path, row.frame.line] }.uniq
      idle = timeline.threads.values.flat_map(&:intervals).select { |interval| interval.state == :idle }
      assert_includes idle.map(&:reason), :lock
    end
  end

  REASONS = CPU + <<~RUBY
    queue = Queue.new
    r, w = IO.pipe
    sleeper = Thread.new { Thread.current.name = "sleeper"; 10.times { sleep 0.003 } }
    reader = Thread.new { Thread.current.name = "reader"; 10.times { r.read(1) } }
    popper = Thread.new { Thread.current.name = "popper"; 10.times { queue.pop } }
    10.times { sleep 0.004; w.write("x"); queue << 1 }
    [sleeper, reader, popper].each(&:join)
    $stop = true
    cpu.join
  RUBY

  def test_sleep_pipe_io_and_queue_pop_each_get_their_own_reason
    trace_file(REASONS) do |timeline|
      reasons = timeline.threads.values.to_h do |thread|
        [thread.label, thread.intervals.select { |i| i.state == :idle && i.duration_ns > 500_000 }.map(&:reason).tally]
      end
      { "sleeper" => :sleep, "reader" => :io, "popper" => :lock }.each do |label, reason|
        dominant = reasons[label].max_by(&:last)&.first
        assert_equal reason, dominant, "#{label}: #{reasons[label]}"
      end
      released = timeline.threads.values.to_h do |thread|
        [thread.label, thread.intervals.select { |i| i.state == :run && i.site }.map(&:reason).uniq]
      end
      assert_equal [:sleep], released["sleeper"] - [:preempted]
      assert_includes released["reader"], :io
      assert_includes released["popper"], :lock
    end
  end

  def test_without_stacks_the_report_says_so
    trace_file(HOG, stacks: false) do |timeline, _source, trace|
      refute timeline.stacks?
      assert_empty timeline.samples
      assert(timeline.threads.values.flat_map(&:intervals).none?(&:site))
      text, err, status = gvlscope("report", trace)
      assert status.success?, err
      assert_includes text, "Where the waiting came from: stacks: not recorded"
      json, _err, _status = gvlscope("report", "--json", trace)
      assert_equal({ "recorded" => false }, JSON.parse(json)["stacks"])
    end
    text, err, status = gvlscope("report", File.join(ROOT, "test/fixtures/traces/gvl-tracing-1.7.0.json"))
    assert status.success?, err
    assert_includes text, "stacks: not recorded"
  end

  def test_gvlscope_run_records_stacks_unless_told_not_to
    Dir.mktmpdir("gvlscope-code") do |dir|
      source = File.join(dir, "prog.rb")
      File.write(source, HOG)
      with = File.join(dir, "with.gvl")
      without = File.join(dir, "without.gvl")
      _out, err, status = gvlscope("run", "-o", with, "--", RbConfig.ruby, source)
      assert status.success?, err
      assert_includes err, "Counter#spin"
      _out, err, status = gvlscope("run", "--no-stacks", "-o", without, "--", RbConfig.ruby, source)
      assert status.success?, err
      assert GVLScope::Model.timeline(with).stacks?
      refute GVLScope::Model.timeline(without).stacks?
    end
  end

  def test_mn_threads_record_stacks_without_crashing
    trace_file(HOG, env: { "RUBY_MN_THREADS" => "1" }) do |timeline|
      assert_consistent(timeline)
      report = GVLScope::Analysis::Report.new(timeline)
      text = GVLScope::Formats::ReportText.new(report).to_s
      assert_includes text, "Where the waiting came from"
    end
  end

  # Threads of a non-main Ractor record their release sites (their own frames, at their own
  # SUSPENDED), but the sampler (a tracepoint) runs in the main Ractor only: the report says so.
  RACTOR = CPU + <<~RUBY
    RactorResult.of(Ractor.new { 3.times.map { Thread.new { 20.times { Thread.pass; 20_000.times.sum } } }.each(&:join) })
    $stop = true
    cpu.join
  RUBY

  def test_ractors_record_without_crashing_and_the_report_says_what_is_missing
    trace_file(RACTOR) do |timeline|
      assert_consistent(timeline)
      assert_operator timeline.ractors.size, :>=, 2
      others = timeline.threads.values.reject { |thread| thread.ractor_id <= 1 }.map(&:serial)
      refute(timeline.samples.any? { |sample| others.include?(sample.thread) }, "a sample from a non-main Ractor")
      text = GVLScope::Formats::ReportText.new(GVLScope::Analysis::Report.new(timeline)).to_s
      assert_includes text, "holder samples: main Ractor only"
    end
  end

  def test_the_flight_recorder_dumps_carry_the_stacks
    Dir.mktmpdir("gvlscope-code") do |dir|
      source = File.join(dir, "prog.rb")
      File.write(source, HOG)
      _out, err, status = run_ruby(<<~RUBY)
        require "gvlscope"
        require "logger"
        GVLScope::FlightRecorder.start(seconds: 30, dir: #{dir.inspect}, signal: nil, logger: Logger.new(nil))
        load #{source.inspect}
        GVLScope::FlightRecorder.dump("test")
        GVLScope::FlightRecorder.stop
      RUBY
      assert status.success?, err
      dump = Dir[File.join(dir, "gvlscope-flight-*.gvl")].first
      timeline = GVLScope::Model.timeline(dump)
      assert timeline.stacks?
      refute_empty timeline.samples
      assert_equal "Counter#spin", GVLScope::Analysis::CodeLocations.new(timeline).holder_profile.first.frame.label
    end
  end

  # The recorded Puma trace (test/fixtures/traces/puma.gvl): its frames carry a method defined in
  # config.ru as "#<Rack::Builder:0x00007f…>.burn" and gem paths whole
  # ("/opt/…/gems/puma-8.0.2/lib/puma/client.rb"). Holders and release sites name code as the
  # thread labels do: no object address, gem paths from the gem's directory.
  def test_labels_and_paths_read_like_the_thread_labels
    code = GVLScope::Analysis::CodeLocations.new(GVLScope::Model::Scan.open(File.join(ROOT, "test/fixtures/traces/puma.gvl")))
    holders = code.holder_profile
    sites = code.release_sites
    assert_equal "`Rack::Builder#burn` (config.ru:8)", holders.first.name
    assert_includes sites.map(&:name), "`IO#wait_readable` at puma-8.0.2/lib/puma/client.rb:287"
    (holders + sites).each do |row|
      refute_match(/0x\h/, row.frame.label)
      refute row.frame.path.to_s.start_with?("/"), row.name
    end
    assert_equal "puma-8.0.2/lib/puma/thread_pool.rb:193", GVLScope::Vocabulary.short_site(
      "/opt/gvlcache/gvlscope/ruby-3.3.8/lib/ruby/gems/3.3.0/gems/puma-8.0.2/lib/puma/thread_pool.rb:193"
    )
  end

  # A block's label keeps "block in": the holder of thrash.gvl ran a block of <main>.
  def test_a_block_keeps_its_label
    code = GVLScope::Analysis::CodeLocations.new(GVLScope::Model::Scan.open(File.join(ROOT, "test/fixtures/traces/thrash.gvl")))
    assert_equal "`block (4 levels) in <main>` (thrash.rb:9)", code.holder_profile.first.name
  end

  def test_code_labels_lose_object_addresses
    v = GVLScope::Vocabulary
    assert_equal "Rack::Builder#render_invoice", v.code_label("#<Rack::Builder:0x00007f3a12345678>.render_invoice")
    assert_equal "block in Rack::Builder#render_invoice", v.code_label("block in #<Rack::Builder:0x00007f3a1234>.render_invoice")
    assert_equal "#<Class>#call", v.code_label("#<Class:0x000055d0c0ffee00>#call")
    assert_equal "Counter#spin", v.code_label("Counter#spin")
  end

  # A release the recorder took no site for (nobody waited, or a trace without stacks) has no
  # known cause: "unknown", never a guess at "blocking" (pipe IO and sleep were shown as that).
  def test_a_release_without_a_site_is_unknown
    events = [[0, "io", :started], [0, "io", :ready], [0, "io", :resumed], [10, "io", :suspended], [20, "io", :ready],
              [20, "io", :resumed], [30, "io", :suspended], [40, "io", :ready], [40, "io", :resumed], [45, "io", :exited]]
    report = GVLScope::Analysis::Report.new(ScriptedTimeline.timeline(events, end_ms: 50))
    assert_equal({ unknown: 2, exit: 1 }, report.all_rows.first.released_by)
    text = GVLScope::Formats::ReportText.new(report).to_s
    assert_match(/^io .* unknown 2, exit 1$/, text)
    assert_includes text, "\n  unknown    no release site recorded (one is recorded only while another thread waits for the GVL, or in an event loop's turn)\n"
    refute_includes text, "blocking"
  end
end
