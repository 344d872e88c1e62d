# frozen_string_literal: true

require_relative "../test_helper"
require "tmpdir"
require "gvlscope/model"
require "gvlscope/model/record"
require "support/synthetic_trace"

# The event record's layout is written once, in ext/gvlscope/format.h: its C functions build and
# read records (the recorder, the report engine), GVLScope::Engine exports its macros, and
# Model::Record, made of those, builds and reads them for Ruby (TraceFile, GvlWriter, the tests'
# writers). Every field at its extremes goes from Record.pack through a .gvl file to the engine's
# reader (Engine::Index) and to the Ruby reader (TraceFile.read).
class RecordTest < Minitest::Test
  ROOT = GVLScopeTestHelper::ROOT
  FORMAT_H = File.join(ROOT, "ext/gvlscope/format.h")
  Record = GVLScope::Model::Record
  KIND = GVLScope::Vocabulary::EVENT_KINDS.each_with_index.to_h.except(nil).freeze
  MAX_VALUE = Record::MAX_VALUE
  MAX_DELTA = Record::MAX_DELTA
  NATIVE_MAX = 2**32 - 1 # a chunk header's u32

  # format.h's integer macros, by name, as the C compiler computes them (those made of numbers,
  # UINT*_C() and the macros before them; the others are left out).
  def format_h_macros
    File.read(FORMAT_H).scan(%r{^#define (GVLS_\w+) ([^/\n]+)}).each_with_object({}) do |(name, text), macros|
      expression = text.strip.gsub(/\bU?INT(?:32|64)_C\((\d+)\)/, '\1')
                       .gsub(/\bGVLS_\w+\b/) { |used| macros.fetch(used, "?").to_s }
      macros[name] = arithmetic(expression) if expression.match?(/\A[\d\s()+\-<]+\z/)
    end
  end

  # An expression of non-negative integers, parentheses, +, - and <<, as C evaluates it: << binds
  # looser than + and -.
  def arithmetic(text)
    tokens = text.scan(/\d+|<<|[()+-]/)
    parse = lambda do |level|
      if level == :shift
        value = parse.call(:sum)
        value <<= (tokens.shift && parse.call(:sum)) while tokens.first == "<<"
        value
      elsif level == :sum
        value = parse.call(:atom)
        value = tokens.shift == "+" ? value + parse.call(:atom) : value - parse.call(:atom) while %w[+ -].include?(tokens.first)
        value
      elsif tokens.first == "("
        tokens.shift
        parse.call(:shift).tap { assert_equal ")", tokens.shift, text }
      else
        Integer(tokens.shift, 10)
      end
    end
    parse.call(:shift).tap { assert_empty tokens, text }
  end

  # The largest kind format.h's enum numbers.
  def format_h_largest_kind = File.read(FORMAT_H)[/enum gvls_event_kind \{(.*?)\};/m, 1].scan(/= (\d+)/).flatten.map { Integer(_1) }.max

  def test_the_layout_is_format_hs
    macros = format_h_macros
    { RECORD_KIND_BITS: Record::KIND_BITS, RECORD_THREAD_BITS: Record::VALUE_BITS, RECORD_DELTA_SHIFT: Record::DELTA_SHIFT,
      RECORD_MAX_DELTA: MAX_DELTA, MAX_THREAD_SERIAL: MAX_VALUE }.each do |name, ruby|
      assert_equal macros.fetch("GVLS_#{name}"), GVLScope::Engine.const_get(name), "Engine::#{name}"
      assert_equal macros.fetch("GVLS_#{name}"), ruby, "Record's #{name}"
    end
    # The three fields fill the 64 bits; every kind format.h numbers fits its field.
    assert_equal 64, Record::DELTA_SHIFT + MAX_DELTA.bit_length
    assert_equal Record::VALUE_BITS, MAX_VALUE.bit_length
    assert_operator format_h_largest_kind, :<=, Record::MAX_KIND
  end

  # Only format.h spells the record's bits in C (its gvls_record* functions use them), and
  # engine.c, which hands them to Ruby.
  def test_c_reads_and_builds_records_through_format_h
    spelled = Dir[File.join(ROOT, "ext/**/*.{c,h}")].select do |path|
      File.read(path).match?(/GVLS_RECORD_(KIND_BITS|THREAD_BITS|DELTA_SHIFT)/)
    end
    assert_equal %w[ext/gvlscope/format.h ext/gvlscope_engine/engine.c], spelled.map { |path| path.delete_prefix("#{ROOT}/") }.sort
  end

  def test_pack_keeps_each_field_apart
    [0, 1, format_h_largest_kind, Record::MAX_KIND].each do |kind|
      [0, 1, MAX_VALUE].each do |value|
        [0, 1, MAX_DELTA].each do |delta|
          record = Record.pack(kind, value, delta)
          assert_equal [kind, value, delta], [Record.kind(record), Record.value(record), Record.delta(record)], record.to_s(16)
          meta = Record.meta(record, NATIVE_MAX)
          assert_equal [kind, value, NATIVE_MAX], [Record.kind(meta), Record.value(meta), Record.meta_native(meta)]
        end
      end
    end
    assert_equal 2**64 - 1, Record.pack(Record::MAX_KIND, MAX_VALUE, MAX_DELTA)
  end

  # Kinds 1 (an event) and TURN_SITE (the largest the readers keep: a turn record), thread serials
  # and ARG values 0, 1 and the largest, deltas 0, 1 and the largest, native serials 1 and the
  # largest: what Record.pack wrote, both readers read.
  def test_the_readers_read_every_field_at_its_extremes
    base = 1_000
    lanes = {
      1 => [base, [[:turn_site, 0, 0], [:arg, MAX_VALUE, 0], [:turn_begin, MAX_VALUE, 1], [:arg, 0, 1], [:started, 1, 2],
                   [:turn_end, 1, MAX_DELTA], [:started, MAX_VALUE, MAX_DELTA], [:suspended, MAX_VALUE, MAX_DELTA],
                   [:arg, 1, MAX_DELTA]]],
      NATIVE_MAX => [0, [[:started, 0, 0]]],
    }
    last = base + MAX_DELTA
    turns = [[base, 0, :turn_site, MAX_VALUE], [base + 1, MAX_VALUE, :turn_begin, 0], [last, 1, :turn_end, 0]]
    Dir.mktmpdir("gvlscope-record") do |dir|
      path = File.join(dir, "extremes.gvl")
      SyntheticTrace.write_records(path, lanes, end_ns: last + 1)

      file = GVLScope::Model::TraceFile.read(path)
      assert_equal [0, base + 2, last, last], file.times
      assert_equal %i[started started started suspended], file.kinds
      assert_equal [0, 1, MAX_VALUE, MAX_VALUE], file.threads
      assert_equal [NATIVE_MAX, 1, 1, 1], file.natives
      assert_equal({ GVLScope::Model::TraceFile.site_key(last, MAX_VALUE) => 1 }, file.site_ids)
      assert_equal turns, file.raw_turns

      indexed = GVLScope::Model::TraceFile.index(path)
      index = GVLScope::Engine::Index.open(path, indexed.args?, indexed.chunk_index)
      nil until index.step(1 << 20)
      assert_equal({ events: 4, stack_records: 6, last_time: last, bad_kind: nil, bad_byte: nil }, index.summary.to_h)
      assert_equal [0, 1, MAX_VALUE], index.serials
      found = index.turns
      assert_equal turns, found.times.each_index.map { |at|
        [found.times[at], found.serials[at], GVLScope::Engine::EVENT_KINDS[found.kinds[at]], found.values[at]]
      }
    end
  end

  # The largest kind a record holds is no kind format.h numbers: both readers name it, and the
  # byte of its record.
  def test_the_readers_name_the_largest_kind
    Dir.mktmpdir("gvlscope-record") do |dir|
      path = File.join(dir, "kind.gvl")
      SyntheticTrace.write_records(path, { 1 => [0, [[:started, 1, 0], [Record::MAX_KIND, MAX_VALUE, MAX_DELTA]]] },
                                   end_ns: MAX_DELTA + 1)
      message = "#{path}: unknown event kind #{Record::MAX_KIND} at byte #{48 + 8 + 24 + 8} (corrupt file?)"
      ruby = assert_raises(GVLScope::FormatError) { GVLScope::Model::TraceFile.read(path) }
      assert_equal message, ruby.message
      engine = assert_raises(GVLScope::FormatError) { GVLScope::Model::Scan.new(GVLScope::Model::TraceFile.index(path)) }
      assert_equal message, engine.message
    end
  end
end
