# frozen_string_literal: true

require "test_helper"
require "json"
require "timeout"
require "tmpdir"
require "gvlscope/cli"

# A deterministic mutation fuzzer of the trace readers. Small valid traces (.gvl, built here byte
# by byte, and gvl-tracing JSON) are mutated with a seeded Random: bit flips, truncations, byte
# insertions and deletions, chunk headers that lie, huge numbers, JSON values of the wrong type.
# Each case goes through everything `gvlscope report`/`export`/`summary` do (Model.read, Timeline,
# Analysis::Report, every format). It must either work or raise a GVLScope::Error whose one-line
# message starts with the file's path; no other exception, no hang, no huge allocation.
class FuzzTest < Minitest::Test
  include GVLScopeTestHelper

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

    KIND = { started: 1, ready: 2, resumed: 3, suspended: 4, exited: 5, gc_enter: 6, gc_exit: 7 }.freeze

    # records: [[kind, thread serial, ns since base], ...] in time order.
    def events(native, tid, base, records, dropped: 0)
      packed = records.map { |kind, serial, delta| KIND.fetch(kind) | serial << 4 | delta << 28 }
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

  # The same through the real command: exit 1 and one line naming the file, never "internal error".
  def test_the_cli_gives_one_line_for_broken_traces
    broken = {
      "cut.gvl" => CONTENTION[0, CONTENTION.bytesize - 30],
      "huge-count.gvl" => lie(CONTENTION, 0) { |payload| payload[16, 4] = [0xFFFF_FFFF].pack("L<") },
      "huge-time.gvl" => lie(CONTENTION, 0) { |payload| payload[8, 8] = [2**64 - 1].pack("Q<") },
      "bad-kind.gvl" => CONTENTION.dup.tap { |data| data[40 + 8 + 24] = [0x0f | (1 << 4)].pack("C") },
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

  # Both readers (the Timeline, and the native engine's Model::Scan that the CLI uses) must agree:
  # the same error, or the same outputs byte for byte.
  def render(path)
    old = outputs { GVLScope::Model::Timeline.new(GVLScope::Model.read(path)) }
    new = outputs { GVLScope::Model::Scan.open(path) }
    assert_equal old.keys, new.keys, "#{path}: both readers give the same outputs or the same error"
    old.each { |name, output| assert output == new[name], "#{path}: #{name} differs between the readers" }
    raise GVLScope::FormatError, old[:error] if old[:error]

    :ok
  end

  # Every output of the trace the block reads, by format; or { error: the GVLScope::Error's message }.
  def outputs
    timeline = yield
    report = GVLScope::Analysis::Report.new(timeline)
    made = {}
    GVLScope::Formats.for_command("export").each do |entry|
      made[entry.name] = entry.format_class.new(timeline).to_s.b unless entry.stacks && !timeline.stacks? # refused: test/folded_test.rb
    end
    made[:summary] = GVLScope::Formats::SummaryText.new(timeline).to_s
    GVLScope::Formats.for_command("report").each do |entry|
      # The HTML page embeds the intervals: the Scan collects them in a pass of its own.
      made[entry.name] = entry.format_class.new(report).to_s
    end
    made[:short] = GVLScope::Formats::ReportText.new(report).short
    made
  rescue GVLScope::Error => e
    { error: e.message }
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
      case @random.rand(10)
      when 0 # bit flips
        @random.rand(1..8).times do
          at = @random.rand(data.bytesize)
          data.setbyte(at, data.getbyte(at) ^ (1 << @random.rand(8)))
        end
      when 1 then data = data.byteslice(0, @random.rand(data.bytesize)) # cut short
      when 2 then data.insert(@random.rand(data.bytesize + 1), @random.bytes(@random.rand(1..16)))
      when 3 # bytes deleted
        at = @random.rand(data.bytesize)
        data = data.byteslice(0, at) + data.byteslice(at + @random.rand(1..16)..).to_s
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
