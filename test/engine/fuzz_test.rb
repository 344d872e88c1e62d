# frozen_string_literal: true

require "test_helper"
require "json"
require "timeout"
require "tmpdir"
require "stringio"
require "gvlscope/cli"
require "gvlscope/live"
require "gvlscope/analysis/advisor"
require "gvlscope/analysis/advisor_inputs"
require "gvlscope/analysis/gvl_simulation"
require "support/reference_timeline"
require "support/cli_fuzz"

# A deterministic mutation fuzzer of the trace readers. Small valid traces (.gvl, built here byte
# by byte, and gvl-tracing JSON) are mutated with a seeded Random: bit flips, truncations, byte
# insertions and deletions, chunk headers that lie, huge numbers, JSON values of the wrong type.
# Each case goes through everything `gvlscope report`/`export`/`summary` do (Model::Scan,
# Analysis::Report, every format). It must either work or raise a GVLScope::Error whose one-line
# message starts with the file's path; no other exception, no hang, no huge allocation. And the
# plain Ruby reference (test/support/reference_timeline.rb) must read it the same: the same error,
# or the same answers.
class FuzzTest < Minitest::Test
  include GVLScopeTestHelper
  include ReferenceCheck

  SEED = Integer(ENV.fetch("GVLSCOPE_FUZZ_SEED", 16))
  BINARY_CASES = 600
  JSON_CASES = 400
  CASE_TIMEOUT = 5 # seconds; a case takes milliseconds
  # Objects one case may allocate: the inputs are a few KB, so a case that allocates millions
  # believed a lying length field.
  MAX_OBJECTS = 2_000_000

  # The .gvl format (docs/format.md), written by hand so the seeds are the same on every run.
  module GVL
    module_function

    def file(*chunks, pid: 4242, timeslice_us: 100_000)
      ["GVLSCOPE", 1, 40, 123_456, 1_700_000_000_000_000_000, pid, timeslice_us].pack("a8L<L<Q<Q<L<L<") + chunks.join
    end

    def chunk(type, payload) = [type, payload.bytesize].pack("L<L<") + payload

    KIND = GVLScope::Vocabulary::EVENT_KINDS.each_with_index.to_h.except(nil).freeze

    # records: [[kind, thread serial, ns since base], ...] in time order.
    def events(native, tid, base, records, dropped: 0)
      packed = records.map { |kind, serial, delta| GVLScope::Model::Record.pack(KIND.fetch(kind), serial, delta) }
      chunk(1, [native, tid, base, records.size, dropped].pack("L<L<Q<L<L<") + packed.pack("Q<*"))
    end

    def threads(*rows) = chunk(2, rows.map { |serial, ractor, flags, name| [serial, ractor, flags, name.bytesize].pack("L<4") + name.b }.join)
    def ending(end_ns, events, dropped = 0) = chunk(3, [end_ns, events, dropped].pack("Q<3"))
  end

  # The main thread and a worker contending for the GVL, GC, a preemption, an exit.
  CONTENTION = GVL.file(
    GVL.events(1, 1001, 0, [[:resumed, 1, 0], [:started, 2, 100], [:gc_enter, 1, 200], [:gc_exit, 1, 300],
                            [:suspended, 1, 1_000], [:ready, 1, 5_000], [:resumed, 1, 120_000_000],
                            [:suspended, 1, 150_000_000]]),
    GVL.events(2, 1002, 150, [[:ready, 2, 0], [:resumed, 2, 850], [:suspended, 2, 100_000_000],
                              [:ready, 2, 100_000_010], [:resumed, 2, 130_000_000], [:exited, 2, 139_999_000]],
               dropped: 3),
    GVL.threads([1, 1, 1, ""], [2, 1, 2, "worker"]),
    GVL.ending(160_000_000, 14, 3),
  )
  # M:N: two Ruby threads of a second Ractor on one native thread (the exports' native lanes).
  SHARED_NATIVE = GVL.file(
    GVL.events(1, 2001, 0, [[:resumed, 3, 0], [:suspended, 3, 10_000], [:resumed, 4, 10_500], [:suspended, 4, 20_000],
                            [:ready, 3, 20_100], [:resumed, 3, 20_200], [:exited, 3, 30_000], [:exited, 4, 30_100]]),
    GVL.threads([3, 2, 0, "ractor worker"], [4, 2, 0, "named \u00e9"]),
    GVL.ending(40_000, 8),
  )
  BINARY_SEEDS = [CONTENTION, SHARED_NATIVE].freeze

  # gvl-tracing's Chrome trace events: the recorded fixture and a small one.
  JSON_SEEDS = [
    JSON.parse(File.read(File.join(ROOT, "test/fixtures/traces/gvl-tracing-1.7.0.json"))),
    { "traceEvents" => [
      { "ph" => "M", "pid" => 7, "tid" => 0, "name" => "thread_name", "args" => { "name" => "Main Thread" } },
      { "ph" => "M", "pid" => 7, "tid" => 1, "name" => "thread_name", "args" => { "name" => "worker" } },
      { "ph" => "B", "pid" => 7, "tid" => 0, "ts" => 1.0, "name" => "started_tracing" },
      { "ph" => "B", "pid" => 7, "tid" => 1, "ts" => 2.0, "name" => "started" },
      { "ph" => "B", "pid" => 7, "tid" => 1, "ts" => 3.0, "name" => "wants_gvl" },
      { "ph" => "B", "pid" => 7, "tid" => 0, "ts" => 4.0, "name" => "waiting" },
      { "ph" => "B", "pid" => 7, "tid" => 1, "ts" => 5.5, "name" => "running" },
      { "ph" => "B", "pid" => 7, "tid" => 1, "ts" => 9.0, "name" => "gc" },
      { "ph" => "B", "pid" => 7, "tid" => 1, "ts" => 9.5, "name" => "running" },
      { "ph" => "B", "pid" => 7, "tid" => 1, "ts" => 12.0, "name" => "died" },
      { "ph" => "B", "pid" => 7, "tid" => 0, "ts" => 13.0, "name" => "stopped_tracing" },
    ] },
  ].freeze

  # Values a JSON field can wrongly hold, as JSON text (1e400 and 2^70 have no Ruby literal that
  # JSON.generate writes; a lone \xff byte is not UTF-8).
  ODD_VALUES = ["null", "true", "-1", "-9223372036854775809", "1e400", "-1e400", "1180591620717411303424", "0.5",
                "\"\"", "\"x\"", "[]", "{}", "[1,2]", "{\"name\":1}", "\"\xff\"".b, "1e-400", "0"].freeze

  # Live snapshots as `gvlscope top --once --json` writes them, for `advise --snapshot`: a pool
  # of threads (alone, and two snapshots for an interval), routes kept apart, a Puma scrape.
  SNAPSHOT_CASES = 300
  SNAPSHOT_SEEDS = begin
    ms = 1_000_000
    row = lambda do |serial, label, run, wait, idle|
      { "serial" => serial, "label" => label, "ractor_id" => 1, "state" => "idle", "exited" => false, "run_ns" => run,
        "wait_ns" => wait, "idle_ns" => idle, "gc_ns" => 0, "holds" => 10, "waits" => 5, "longest_hold_ns" => ms,
        "longest_wait_ns" => ms, "released_blocking" => 3, "released_preempted" => 2, "released_exit" => 0,
        "code" => { "at" => "Object#work (app.rb:3)" }, "io_overlap_wait_ns" => 0 }
    end
    pool = lambda do |scale, time_ns|
      threads = [row.(1, "main", 0, 0, 10_000 * ms * scale)] +
                (2..5).map { |n| row.(n, "puma srv tp #{n}", 2_000 * ms * scale, 3_000 * ms * scale, 5_000 * ms * scale) }
      { "version" => 1, "source" => "socket", "pid" => 4242, "time_ns" => time_ns, "processes" => 1,
        "wall_ns" => 10_000 * ms * scale, "held_ns" => 8_000 * ms * scale, "run_ns" => 8_000 * ms * scale, "gc_ns" => 0,
        "wait_ns" => 12_000 * ms * scale, "idle_ns" => 30_000 * ms * scale, "waiting_threads" => 1,
        "acquisitions" => 40 * scale, "releases" => { "blocking" => 12, "preempted" => 8, "exit" => 0 },
        "hold_histogram" => [0, 1, 2, 3], "wait_histogram" => [1, 0, 4], "waiters_at_acquire_histogram" => [3, 2],
        "threads" => threads, "exited_threads" => row.(0, "(exited threads)", 0, 0, 0), "workers" => [], "findings" => [],
        "trace_path" => nil, "timeslice_ns" => 100_000_000, "breakdown" => [] }
    end
    routes = pool.(1, 10_000 * ms).merge("breakdown" => [["cpu", 4.9, 0.0], ["io", 1.6, 9.0]].map do |label, run, idle|
      { "kind" => "route", "label" => label, "tags" => { "method" => "GET" }, "count" => 1_000, "run_ns" => (1_000 * run * ms).round,
        "wait_ns" => 5_000 * ms, "idle_ns" => (1_000 * idle * ms).round, "gc_ns" => 0, "duration_ns" => 20_000 * ms }
    end)
    scrape = { "version" => 1, "source" => "prometheus", "pid" => nil, "time_ns" => 5, "processes" => 2,
               "wall_ns" => 20_000 * ms, "held_ns" => 9_000 * ms, "wait_ns" => 4_000 * ms, "acquisitions" => 80,
               "workers" => [0, 1].map { |n| { "worker" => n, "pid" => 100 + n, "wall_ns" => 10_000 * ms, "held_ns" => 4_500 * ms,
                                                "wait_ns" => 2_000 * ms, "waiting_threads" => 1 } } }
    [[pool.(1, 10_000 * ms)], [pool.(0, 0), pool.(1, 10_000 * ms)], [routes], [scrape]].freeze
  end
  # Keys a mutation may add to an object of a snapshot.
  SNAPSHOT_KEYS = (%w[version source pid time_ns interval_ns processes wall_ns held_ns wait_ns run_ns threads workers breakdown
                      releases hold_histogram exited_threads timeslice_ns serial label state code tags count] +
                   GVLScope::Live::Snapshot::THREAD_FIELDS.map(&:to_s)).uniq.freeze
  # More wrong values for snapshots: too big for a Float's integer, a lone surrogate (not UTF-8 once
  # parsed), deep nesting.
  SNAPSHOT_ODD_VALUES = [*ODD_VALUES, "1e300", "-1e300", "-0.0", "9223372036854775808", "\"\\ud800\"",
                         "#{'[' * 50}#{']' * 50}", "\"\\u001b]0;title\\u0007\""].freeze

  # The Puma plugin's /metrics as `advise/top --url` read it: two workers, every family.
  SCRAPE_CASES = 400
  SCRAPE_SEED = [0, 1].map do |worker|
    labels = %(worker="#{worker}",pid="#{100 + worker}")
    <<~TEXT
      # HELP gvlscope_wall_seconds_total Wall time since metrics were enabled.
      # TYPE gvlscope_wall_seconds_total counter
      gvlscope_wall_seconds_total{#{labels}} 10.5
      gvlscope_gvl_held_seconds_total{#{labels}} 4.25
      gvlscope_gvl_wait_seconds_total{#{labels}} 1.5
      gvlscope_waiting_threads{#{labels}} 2
      gvlscope_gvl_acquisitions_total{#{labels}} 1200
      gvlscope_gvl_releases_total{#{labels},cause="blocking"} 700
      gvlscope_gvl_releases_total{#{labels},cause="preempted"} 500
      gvlscope_gvl_hold_seconds_bucket{#{labels},le="1.6384e-05"} 100
      gvlscope_gvl_hold_seconds_bucket{#{labels},le="0.001048576"} 900
      gvlscope_gvl_hold_seconds_bucket{#{labels},le="+Inf"} 1200
      gvlscope_gvl_wait_seconds_bucket{#{labels},le="0.000131072"} 40
      gvlscope_gvl_wait_seconds_bucket{#{labels},le="+Inf"} 60
      gvlscope_waiters_at_acquire_bucket{#{labels},le="1"} 30
      gvlscope_waiters_at_acquire_bucket{#{labels},le="+Inf"} 60
    TEXT
  end.join.freeze
  SCRAPE_ODD_NUMBERS = %w[1e300 -1e300 1e400 -1e400 1e-300 -1 NaN +Inf -Inf 0 18446744073709551616 0x10 1_000 9e18 .5 -0].freeze

  def setup
    @dir = Dir.mktmpdir("gvlscope-fuzz")
    @random = Random.new(SEED)
    @outcomes = Hash.new(0)
  end

  def teardown
    FileUtils.rm_rf(@dir)
  end

  def test_the_seeds_are_valid_traces
    BINARY_SEEDS.each_with_index { |seed, n| assert_equal :ok, run_case("seed#{n}.gvl", seed) }
    JSON_SEEDS.each_with_index { |seed, n| assert_equal :ok, run_case("seed#{n}.json", JSON.generate(seed)) }
  end

  def test_mutated_gvl_traces
    fuzz("gvl", BINARY_CASES) { mutate_binary(BINARY_SEEDS.sample(random: @random)) }
  end

  def test_mutated_gvl_tracing_json
    fuzz("json", JSON_CASES) { mutate_json(JSON_SEEDS.sample(random: @random)) }
  end

  # `advise --snapshot` on mutated snapshot files: advice (exit 0) or one line naming the file
  # (exit 1), never "internal error" nor a backtrace (issue 28: 236 of 1,200 were internal errors).
  def test_mutated_snapshot_files
    codes = with_short_simulations do
      SNAPSHOT_SEEDS.each_with_index do |seed, n|
        assert_equal 0, advise_case("seed#{n}.json", seed.map { |snapshot| JSON.generate(snapshot) }.join("\n")).first
      end
      Array.new(SNAPSHOT_CASES) { |n| advise_case("case#{n}.json", mutate_snapshot(SNAPSHOT_SEEDS.sample(random: @random))).first }
    end
    warn format("fuzz snapshots: %d cases (seed %d): %p", SNAPSHOT_CASES, SEED, codes.tally) if ENV["GVLSCOPE_TEST_VERBOSE"]
    assert_includes codes, 0, "some mutations must still advise"
    assert_includes codes, 1, "some mutations must be refused"
  end

  # Mutated /metrics pages through what `advise --url` does with two of them: parse, subtract,
  # advise. A snapshot or one GVLScope::Error line (issue 28: FloatDomainError on 1e300 and
  # le="1e400", NoMethodError on le="1e-300").
  def test_mutated_scrape_pages
    outcomes = Array.new(SCRAPE_CASES) do |n|
      page = mutate_scrape(SCRAPE_SEED)
      Timeout.timeout(CASE_TIMEOUT) { advise_on_scrape(page) }
    rescue GVLScope::Error => e
      refute_includes e.message, "\n", "case #{n}: one line"
      :refused
    rescue Timeout::Error
      flunk "case #{n}: no answer in #{CASE_TIMEOUT} s for #{page.inspect[0, 600]}"
    rescue StandardError => e
      flunk "case #{n}: #{e.class}: #{e.message[0, 300]}\n#{e.backtrace.first(6).join("\n")}\npage: #{page.inspect[0, 2000]}"
    end
    warn format("fuzz scrapes: %d cases (seed %d): %p", SCRAPE_CASES, SEED, outcomes.tally) if ENV["GVLSCOPE_TEST_VERBOSE"]
    assert_includes outcomes, :ok
    assert_includes outcomes, :refused
  end

  # The same through the real command: exit 1 and one line naming the file, never "internal error".
  def test_the_cli_gives_one_line_for_broken_traces
    broken = {
      "cut.gvl" => CONTENTION[0, CONTENTION.bytesize - 30],
      "huge-count.gvl" => lie(CONTENTION, 0) { |payload| payload[16, 4] = [0xFFFF_FFFF].pack("L<") },
      "huge-time.gvl" => lie(CONTENTION, 0) { |payload| payload[8, 8] = [2**64 - 1].pack("Q<") },
      # the first record's low byte: kind MAX_KIND (unknown), thread 1
      "bad-kind.gvl" => CONTENTION.dup.tap { |data| data[40 + 8 + 24] = [GVLScope::Model::Record.pack(GVLScope::Model::Record::MAX_KIND, 1, 0)].pack("C") },
      "ts.json" => JSON.generate(JSON_SEEDS[1]).sub('"ts":5.5', '"ts":1e400'),
      "tid.json" => JSON.generate(JSON_SEEDS[1]).gsub('"tid":1,', '"tid":-3,'),
      "bytes.json" => "[{\"ph\":\"B\",\xff".b,
    }
    broken.each do |name, data|
      path = File.join(@dir, name)
      File.binwrite(path, data)
      [%w[report --json], ["export", "--format", "perfetto", "-o", File.join(@dir, "out.pftrace")], %w[summary]].each do |args|
        out, err, status = gvlscope(*args, path)
        assert_equal 1, status.exitstatus, "#{name} #{args.first}: #{out}#{err}"
        assert_match(/\Agvlscope: #{Regexp.escape(path)}: [^\n]+\n\z/, err, "#{name} #{args.first}")
        refute_match(/internal error/, err)
      end
    end
  end

  private

  def clock = Process.clock_gettime(Process::CLOCK_MONOTONIC)

  # The process's peak resident memory (Linux), to catch one huge allocation (a String or Array
  # sized by a lying length field) that counting objects would not.
  def peak_rss_mb
    File.read("/proc/self/status")[/^VmHWM:\s+(\d+) kB/, 1].to_i / 1024
  rescue SystemCallError
    0
  end

  # Runs +cases+ inputs made by the block, as files with the extension +kind+.
  def fuzz(kind, cases)
    started = clock
    peak_before = peak_rss_mb
    cases.times { |n| run_case("case#{n}.#{kind}", yield) }
    seconds = clock - started
    assert_operator peak_rss_mb - peak_before, :<, 200, "#{kind}: the peak memory grew by that many MB"
    warn format("fuzz %s: %d cases (seed %d) in %.2f s: %p", kind, cases, SEED, seconds, @outcomes) if ENV["GVLSCOPE_TEST_VERBOSE"]
    assert_operator @outcomes[:ok], :>, 0, "some mutations must still read: #{@outcomes.inspect}"
    assert_operator @outcomes[:format_error], :>, 0, "some mutations must be refused: #{@outcomes.inspect}"
  end

  # Writes +data+ to NAME, reads and renders it as the CLI does; returns :ok or :format_error.
  def run_case(name, data)
    path = File.join(@dir, name)
    File.binwrite(path, data)
    objects = GC.stat(:total_allocated_objects)
    outcome = Timeout.timeout(CASE_TIMEOUT) { render(path) }
    allocated = GC.stat(:total_allocated_objects) - objects
    assert_operator allocated, :<, MAX_OBJECTS, "#{name}: #{allocated} objects for #{data.bytesize} bytes (#{data.b.inspect[0, 300]})"
    @outcomes[outcome] += 1
    outcome
  rescue GVLScope::Error => e
    assert e.message.start_with?("#{path}: "), "#{name}: the message names the file: #{e.message.inspect}"
    refute_includes e.message, "\n", "#{name}: one line"
    @outcomes[:format_error] += 1
    :format_error
  rescue Timeout::Error
    flunk "#{name}: no answer in #{CASE_TIMEOUT} s for #{data.b.inspect[0, 300]}"
  rescue StandardError, SystemStackError, NoMemoryError => e
    flunk "#{name}: #{e.class}: #{e.message[0, 300]}\n#{e.backtrace.first(6).join("\n")}\ninput: #{data.b.inspect[0, 600]}"
  end

  # The engine (Model::Scan, what the CLI reads with) and the reference must agree: the same
  # error, or the same answers (ReferenceCheck).
  def render(path)
    scan = nil
    made = outputs { scan = GVLScope::Model::Scan.open(path, spill: true) }
    reference = begin
      ReferenceTimeline.open(path).tap { |timeline| ReferenceReport.new(timeline).findings }
    rescue GVLScope::Error => e
      e.message
    end
    if made[:error]
      assert_equal made[:error], reference, "#{path}: both readers give the same error"
      raise GVLScope::FormatError, made[:error]
    end
    refute_kind_of String, reference, "#{path}: the reference reads it too"
    assert_engine_matches_reference(path, scan: scan, reference: reference)
    :ok
  end

  # Every output of the trace the block reads, by format; or { error: the GVLScope::Error's message }.
  def outputs
    timeline = yield
    report = GVLScope::Analysis::Report.new(timeline)
    made = {}
    GVLScope::Formats.for_command("export").each do |entry|
      made[entry.name] = entry.format_class.new(timeline).to_s.b unless entry.stacks && !timeline.stacks? # refused: test/formats/folded_test.rb
    end
    made[:summary] = GVLScope::Formats::SummaryText.new(timeline).to_s
    GVLScope::Formats.for_command("report").each do |entry|
      made[entry.name] = entry.format_class.new(report).to_s
    end
    made[:short] = GVLScope::Formats::ReportText.new(report).short
    made
  rescue GVLScope::Error => e
    { error: e.message }
  end

  def with_short_simulations(&) = CLIFuzz.short_simulations(&)

  # `gvlscope advise --snapshot NAME` in this process on +data+; returns [exit code, stderr].
  def advise_case(name, data)
    path = File.join(@dir, name)
    File.binwrite(path, data)
    out = StringIO.new
    err = StringIO.new
    # --current-threads: a scrape's process totals need it (a socket's threads ignore it).
    code = Timeout.timeout(CASE_TIMEOUT * 4) do
      GVLScope::CLI.new(out: out, err: err).run(["advise", "--snapshot", path, "--cores", "2", "--current-threads", "8"])
    end
    input = data.b.inspect[0, 400]
    refute_match(/internal error|\.rb:\d+:in /, err.string, "#{name}: #{input}")
    if code.zero?
      assert_match(/\Agvlscope advise: /, out.string, "#{name}: #{input}")
    else
      assert_equal 1, code, "#{name}: #{err.string}"
      # A reader's error names the path; the advisor's, the snapshot it advised from ("snapshot NAME").
      named = /#{Regexp.escape(path)}|snapshot #{Regexp.escape(name)}/
      assert_match(/\Agvlscope: (?:#{named}): [^\n]+\n\z/, err.string, "#{name}: one line naming the file: #{input}")
    end
    [code, err.string]
  rescue Timeout::Error
    flunk "#{name}: no answer in #{CASE_TIMEOUT * 4} s for #{data.b.inspect[0, 300]}"
  end

  def advise_on_scrape(page)
    earlier = GVLScope::Live::Scrape.parse(SCRAPE_SEED.gsub(/ [\d.e+-]+$/, " 0"), time_ns: 0)
    later = GVLScope::Live::Scrape.parse(page, time_ns: 10**10)
    workload = GVLScope::Analysis::AdvisorInputs.from_live(later, earlier, source: "scrape", current_threads: 8)
    GVLScope::Analysis::Advisor.new(workload, cores: 2).advice
    :ok
  end

  def mutate_scrape(seed)
    lines = seed.b.lines # binary, as Net::HTTP gives a body
    @random.rand(1..4).times do
      at = @random.rand(lines.size)
      line = lines[at].dup
      case @random.rand(7)
      when 0, 1 then line.sub!(/ \S+$/, " #{SCRAPE_ODD_NUMBERS.sample(random: @random)}")
      when 2 then line.sub!(/le="[^"]*"/, %(le="#{SCRAPE_ODD_NUMBERS.sample(random: @random)}"))
      when 3 then line.sub!(/(worker|pid)="[^"]*"/) { %(#{Regexp.last_match(1)}="#{['x', '-1', '1e400', '', '9' * 30].sample(random: @random)}") }
      when 4 then lines.insert(at, line.dup) # a series twice
      when 5 then line = ""
      when 6 then line.insert(@random.rand(line.bytesize + 1), @random.bytes(@random.rand(1..4)))
      end
      lines[at] = line
    end
    page = lines.join
    page = page.byteslice(0, @random.rand(page.bytesize)) if @random.rand(6).zero? # cut short
    page
  end

  def containers(value) = CLIFuzz.containers(value)

  def mutate_snapshot(seed)
    snapshots = JSON.parse(JSON.generate(seed)) # a deep copy
    raw = {}
    odd = lambda do
      token = "@@RAW#{raw.size}@@"
      raw[token] = SNAPSHOT_ODD_VALUES.sample(random: @random)
      token
    end
    @random.rand(1..3).times do
      target = containers(snapshots).sample(random: @random)
      if target.is_a?(Hash)
        key = (target.keys + SNAPSHOT_KEYS).sample(random: @random)
        case @random.rand(4)
        when 0, 1 then target[key] = odd.()
        when 2 then target.delete(target.keys.sample(random: @random))
        when 3 then target[key] = [nil, [], {}, [1, 2], "x", -1, 2**70].sample(random: @random)
        end
      elsif target.is_a?(Array)
        at = @random.rand(target.size + 1)
        @random.rand(2).zero? ? target.insert(at, odd.()) : target.delete_at(at)
      end
    end
    text = snapshots.map { |snapshot| JSON.generate(snapshot) }.join(@random.rand(3).zero? ? "\n\n" : "\n").b
    text = "[#{text.tr("\n", ",").squeeze(",")}]".b if @random.rand(4).zero? # one JSON array
    raw.each { |token, value| text.sub!("\"#{token}\"", value.b) }
    case @random.rand(8)
    when 0 then text = text.byteslice(0, @random.rand(text.bytesize + 1)) # cut short: invalid JSON
    when 1 then text.insert(@random.rand(text.bytesize + 1), "\xff\xfe".b) # not UTF-8
    end
    text
  end

  # The chunks of a seed: [offset of the chunk header, type, payload bytes].
  def chunks_of(data)
    offset = 40
    chunks = []
    while offset + 8 <= data.bytesize
      type, bytes = data.unpack("L<L<", offset: offset)
      chunks << [offset, type, bytes]
      offset += 8 + bytes
    end
    chunks
  end

  # A copy of +data+ where the payload of its +index+th chunk was changed by the block (the
  # chunk header still says the old size: a lie when the block changed the length).
  def lie(data, index)
    offset, _type, bytes = chunks_of(data)[index]
    payload = data.byteslice(offset + 8, bytes).dup
    yield payload
    data.byteslice(0, offset + 8) + payload + data.byteslice(offset + 8 + bytes..)
  end

  def huge = [2**32 - 1, 2**31, 2**63, 2**64 - 1, 0, 1, 2**36].sample(random: @random)

  def mutate_binary(seed)
    data = seed.dup.b
    @random.rand(1..3).times do
      break if data.empty?

      chunks = chunks_of(data)
      offset, type, bytes = chunks.sample(random: @random) || [40, 0, 0]
      case (kind = @random.rand(10))
      when 0..3 then data = CLIFuzz.blind_mutation(data, kind, @random)
      when 4 # the chunk header lies about the payload's size or type
        field = @random.rand(2)
        value = field.zero? ? @random.rand(0..5) : [0, 1, 7, 23, 24, bytes - 8, bytes + 8, 2**32 - 1].sample(random: @random)
        data[offset + 4 * field, 4] = [value.clamp(0, 2**32 - 1)].pack("L<") if offset + 8 <= data.bytesize
      when 5 # a huge number in a u64 field: base_ns, end_ns, the end record's counts, header times
        target = type == 1 ? offset + 16 : (type == 3 ? offset + 8 + 8 * @random.rand(3) : 16 + 8 * @random.rand(2))
        data[target, 8] = [huge].pack("Q<") if target + 8 <= data.bytesize
      when 6 # a huge u32: an event chunk's count or native serial, a name's length, the header's
        target = type == 1 ? offset + 8 + [0, 20, 24].sample(random: @random) : (type == 2 ? offset + 8 + 12 : 8 + 4 * @random.rand(1..7))
        data[target, 4] = [huge & 0xFFFF_FFFF].pack("L<") if target + 4 <= data.bytesize
      when 7 # a record with another kind, thread or time
        if type == 1 && bytes > 24
          at = offset + 8 + 24 + 8 * @random.rand((bytes - 24) / 8)
          data[at, 8] = [@random.rand(2**64)].pack("Q<") if at + 8 <= data.bytesize
        end
      when 8 # a chunk twice (two thread tables, two ends), or one gone
        whole = data.byteslice(offset, 8 + bytes).to_s
        data = @random.rand(2).zero? ? data + whole : data.byteslice(0, offset) + data.byteslice(offset + 8 + bytes..).to_s
      when 9 # a thread name that is not UTF-8
        data += GVL.threads([@random.rand(1..5), @random.rand(3), @random.rand(4), @random.bytes(@random.rand(0..12))])
      end
    end
    data
  end

  def mutate_json(seed)
    events = seed.is_a?(Hash) ? seed["traceEvents"] : seed
    events = JSON.parse(JSON.generate(events)) # a deep copy
    raw = {}
    @random.rand(1..3).times do
      event = events.grep(Hash).sample(random: @random) || {}
      case @random.rand(6)
      when 0, 1, 2 # a field of the wrong type or size
        key = (event.keys + %w[ts tid pid name ph args]).sample(random: @random)
        token = "@@RAW#{raw.size}@@"
        raw[token] = ODD_VALUES.sample(random: @random)
        event[key] = token
      when 3 then event.delete(event.keys.sample(random: @random)) # a field missing
      when 4 then events.insert(@random.rand(events.size + 1), [nil, 1, "x", [], {}].sample(random: @random))
      when 5 then event["args"] = { "name" => @random.bytes(4).force_encoding("UTF-8").scrub }
      end
    end
    text = JSON.generate(seed.is_a?(Hash) ? { "traceEvents" => events } : events).b
    raw.each { |token, value| text.sub!("\"#{token}\"", value) }
    case @random.rand(8)
    when 0 then text = text.byteslice(0, @random.rand(text.bytesize)) # cut short: invalid JSON
    when 1 then text.insert(@random.rand(text.bytesize), "\xff\xfe".b) # not UTF-8, in the invalid-JSON path
    end
    text
  end
end
