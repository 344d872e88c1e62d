# frozen_string_literal: true

require "json"
require "stringio"
require "timeout"
require "gvlscope/cli"
require "gvlscope/analysis/gvl_simulation"

# Mutated traces and snapshot files through every command that reads them, run in this process
# as exe/gvlscope runs them (GVLScope::CLI#run): each command answers (exit 0) or says what is
# wrong in lines of its own (exit 1); none prints "internal error" or a backtrace, none leaves a
# temporary file beside its output. The seeds are the recorded fixtures: every .gvl of
# test/fixtures/traces and test/fixtures/diff, the gvl-tracing JSON, and the snapshot files and
# /metrics scrapes of test/fixtures/diff. bench/fuzz_cli.rb runs the 1,000 traces and 1,200
# snapshots of issue 37; test/cli/cli_fuzz_test.rb a few of each.
class CLIFuzz
  ROOT = File.expand_path("../..", __dir__)
  TRACE_SEEDS = (Dir[File.join(ROOT, "test/fixtures/{traces,diff}/*.gvl")].sort +
                 [File.join(ROOT, "test/fixtures/traces/gvl-tracing-1.7.0.json")]).freeze
  SNAPSHOT_SEEDS = Dir[File.join(ROOT, "test/fixtures/diff/*.{snapshots.json,prom}")].sort.freeze
  COMMAND_TIMEOUT = 60 # seconds; a command takes milliseconds on these inputs

  # A command that broke the rule: its input (kept in the directory), arguments, status, stderr.
  Failure = Struct.new(:input, :arguments, :status, :err) do
    def to_s = "gvlscope #{arguments.join(' ')}: exit #{status}\n#{err}"
  end

  attr_reader :failures, :runs, :statuses

  def initialize(dir:, seed: 37)
    @dir = dir
    @random = Random.new(seed)
    @failures = []
    @runs = 0
    @statuses = Hash.new(0)
    @out_dir = File.join(dir, "out")
    Dir.mkdir(@out_dir)
  end

  # +count+ mutated traces, each through report (every format, and --html), export (every
  # format), summary, advise and diff (against its seed).
  def traces(count)
    count.times do |n|
      seed = TRACE_SEEDS.sample(random: @random)
      path = File.join(@dir, "trace#{n}#{File.extname(seed)}")
      File.binwrite(path, mutate_trace(File.binread(seed), json: seed.end_with?(".json")))
      trace_commands(path, seed).each { |arguments| check(path, arguments) }
    end
    self
  end

  # +count+ mutated snapshot files and scrapes, each through diff (text, JSON: against its seed)
  # and advise --snapshot.
  def snapshots(count)
    CLIFuzz.short_simulations do
      count.times do |n|
        seed = SNAPSHOT_SEEDS.sample(random: @random)
        scrape = seed.end_with?(".prom")
        path = File.join(@dir, "snapshot#{n}#{scrape ? '.prom' : '.json'}")
        text = File.binread(seed)
        File.binwrite(path, scrape ? mutate_scrape(text) : mutate_snapshots(text))
        [["diff", path, seed], ["diff", seed, path, "--json"],
         ["advise", "--snapshot", path, "--cores", "2", "--current-threads", "8"]].each { |arguments| check(path, arguments) }
      end
    end
    self
  end

  # Routes are simulated request by request (seconds an advice); the input's handling is under
  # test, not the model's precision: 50 times fewer requests.
  def self.short_simulations
    simulation = GVLScope::Analysis::GVLSimulation
    kept = %i[REQUESTS WARM_UP].to_h { |name| [name, simulation.const_get(name)] }
    kept.each { |name, value| simulation.send(:remove_const, name) && simulation.const_set(name, value / 50) }
    yield
  ensure
    kept&.each { |name, value| simulation.send(:remove_const, name) && simulation.const_set(name, value) }
  end

  private

  def trace_commands(path, seed)
    out = ->(name) { File.join(@out_dir, name) }
    reports = GVLScope::Formats.for_command("report").map { |entry| ["report", path, "--format", entry.name] }
    exports = GVLScope::Formats.for_command("export").map do |entry|
      ["export", path, "--format", entry.name, "-o", out.("export#{entry.extension}"), "--force"]
    end
    [*reports, ["report", path, "--html", out.("report.html"), "--force"], *exports, ["summary", path],
     ["--partial", "summary", path], ["advise", path], ["diff", seed, path]]
  end

  def check(input, arguments)
    out = StringIO.new
    err = StringIO.new
    status = Timeout.timeout(COMMAND_TIMEOUT) { GVLScope::CLI.new(out: out, err: err).run(arguments) }
    @runs += 1
    @statuses[status] += 1
    leftovers = Dir.children(@out_dir).grep(/\A\..*\.tmp\z/)
    broken = !(status.zero? || status == 1) || err.string.match?(/internal error|\.rb:\d+:in /) ||
             err.string.each_line.any? { |line| !line.start_with?("gvlscope") } || !leftovers.empty?
    return unless broken

    @failures << Failure.new(input, arguments, status, err.string + (leftovers.empty? ? "" : "left behind: #{leftovers.join(' ')}\n"))
  rescue Timeout::Error
    @failures << Failure.new(input, arguments, :timeout, "no answer in #{COMMAND_TIMEOUT} s")
  end

  def huge = [2**32 - 1, 2**31, 2**63, 2**64 - 1, 0, 1, 2**36, 5 * 10**18].sample(random: @random)

  # A .gvl's framing (docs/format.md): the header's fields, then chunks of (u32 type, u32 size).
  HEADER_FIELDS = [[8, "L<"], [12, "L<"], [16, "Q<"], [24, "Q<"], [32, "L<"], [36, "L<"]].freeze

  def chunk_offsets(data)
    offset = 40
    offsets = []
    while offset + 8 <= data.bytesize
      offsets << offset
      offset += 8 + data.unpack1("L<", offset: offset + 4)
    end
    offsets
  end

  def mutate_trace(data, json:)
    data = data.b
    @random.rand(1..3).times do
      break if data.empty?

      case (kind = @random.rand(json ? 4 : 7))
      when 0..3 then data = CLIFuzz.blind_mutation(data, kind, @random)
      when 4 # a bogus header: magic, version, header size, clocks (the start after 2106), pid, timeslice
        if @random.rand(4).zero?
          data[0, 8] = @random.bytes(8)
        else
          at, pack = HEADER_FIELDS.sample(random: @random)
          value = pack == "L<" ? huge & 0xFFFF_FFFF : huge
          data[at, pack == "L<" ? 4 : 8] = [value].pack(pack) if data.bytesize >= 40
        end
      when 5 # a chunk header that lies about its type or size
        at = chunk_offsets(data).sample(random: @random)
        data[at + 4 * @random.rand(2), 4] = [[0, 1, 2, 3, 4, 5, 23, 24, 2**32 - 1].sample(random: @random)].pack("L<") if at
      when 6 # a huge number in a u64 inside a chunk (a base time, an end record's counts)
        at = chunk_offsets(data).sample(random: @random)
        if at
          target = at + 8 + 8 * @random.rand(4)
          data[target, 8] = [huge].pack("Q<") if target + 8 <= data.bytesize
        end
      end
    end
    data
  end

  # Values a field of a snapshot can wrongly hold, as JSON text.
  ODD_VALUES = ["null", "true", "-1", "0", "0.5", "1e400", "-1e300", "9223372036854775808", "\"\"", "\"x\"", "[]", "{}",
                "[1,2]", "\"\\ud800\"", "\"\xff\"".b, "#{'[' * 40}#{']' * 40}"].freeze

  # The mutations that know nothing of the format (test/engine/fuzz_test.rb's too): kind 0 flips
  # bits, 1 cuts the data short, 2 inserts random bytes, 3 deletes some. Returns the data.
  def self.blind_mutation(data, kind, random)
    case kind
    when 0
      random.rand(1..8).times do
        at = random.rand(data.bytesize)
        data.setbyte(at, data.getbyte(at) ^ (1 << random.rand(8)))
      end
      data
    when 1 then data.byteslice(0, random.rand(data.bytesize))
    when 2 then data.insert(random.rand(data.bytesize + 1), random.bytes(random.rand(1..16)))
    else
      at = random.rand(data.bytesize)
      data.byteslice(0, at) + data.byteslice(at + random.rand(1..16)..).to_s
    end
  end

  # Objects and lists of a parsed snapshot, nested ones too (test/engine/fuzz_test.rb's too).
  def self.containers(value, found = [])
    return found unless value.is_a?(Hash) || value.is_a?(Array)

    found << value
    (value.is_a?(Hash) ? value.values : value).each { |inner| containers(inner, found) }
    found
  end

  def containers(value) = CLIFuzz.containers(value)

  # A snapshot file (JSON lines): fields of the wrong type, missing, or added; then, sometimes,
  # the bytes cut or garbled.
  def mutate_snapshots(text)
    snapshots = text.each_line.map(&:strip).reject(&:empty?).map { |line| JSON.parse(line) }
    raw = {}
    @random.rand(1..3).times do
      target = containers(snapshots).sample(random: @random)
      token = "@@RAW#{raw.size}@@"
      raw[token] = ODD_VALUES.sample(random: @random)
      if target.is_a?(Hash) && !target.empty?
        key = target.keys.sample(random: @random)
        @random.rand(3).zero? ? target.delete(key) : target[key] = token
      elsif target.is_a?(Array)
        at = @random.rand(target.size + 1)
        @random.rand(2).zero? ? target.insert(at, token) : target.delete_at(at)
      end
    end
    out = snapshots.map { |snapshot| JSON.generate(snapshot) }.join("\n").b
    raw.each { |token, value| out.sub!("\"#{token}\"", value.b) }
    case @random.rand(6)
    when 0 then out = out.byteslice(0, @random.rand(out.bytesize + 1))
    when 1 then out.insert(@random.rand(out.bytesize + 1), @random.bytes(@random.rand(1..4)))
    end
    out
  end

  ODD_NUMBERS = %w[1e300 -1e300 1e400 -1 NaN +Inf -Inf 0 18446744073709551616 0x10 .5 -0 x].freeze

  # A /metrics scrape: values and labels replaced, lines gone or doubled, bytes inserted, cut.
  def mutate_scrape(text)
    lines = text.b.lines
    @random.rand(1..4).times do
      at = @random.rand(lines.size)
      line = lines[at].dup
      case @random.rand(6)
      when 0, 1 then line.sub!(/ \S+$/, " #{ODD_NUMBERS.sample(random: @random)}")
      when 2 then line.sub!(/="[^"]*"/, %(="#{ODD_NUMBERS.sample(random: @random)}"))
      when 3 then lines.insert(at, line.dup)
      when 4 then line = ""
      when 5 then line.insert(@random.rand(line.bytesize + 1), @random.bytes(@random.rand(1..4)))
      end
      lines[at] = line
    end
    page = lines.join
    @random.rand(6).zero? ? page.byteslice(0, @random.rand(page.bytesize)) : page
  end
end
