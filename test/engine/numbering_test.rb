# frozen_string_literal: true

require_relative "../test_helper"
require "gvlscope"
require "gvlscope/model"
require "gvlscope/analysis/overview"
require "support/synthetic_trace"

# Every numbering is defined once; every other place that numbers the same things is made from
# that place or checked here:
#   event kinds    ext/gvlscope/format.h (enum gvls_event_kind): the recorder writes them and the
#                  report engine takes them (ext/gvlscope_engine/numbering.h); in Ruby,
#                  Vocabulary::EVENT_KINDS, which Model::TraceFile, Model::Scan, Model::GvlWriter,
#                  Probe (probe.c's counts) and the tests' trace writers take theirs from;
#                  docs/format.md tells them
#   engine states  ext/gvlscope_engine/numbering.h (ENG_STATES, Engine::STATES): Model::Scan::STATES
#   reasons        ext/gvlscope_engine/numbering.h (ENG_REASONS, Engine::REASONS): Model::Scan::REASONS
#   lane states    ext/gvlscope_engine/numbering.h (ENG_LANE_STATES, Engine::LANE_STATES): the order of
#                  an overview bin's values, Analysis::Overview::STATES
# (The recorder's metric states, ext/gvlscope/metrics.h, are checked against
# Vocabulary::METRIC_STATES by test/gem/layout_test.rb.)
class NumberingTest < Minitest::Test
  FORMAT_H = File.join(GVLScopeTestHelper::ROOT, "ext/gvlscope/format.h")
  FORMAT_MD = File.join(GVLScopeTestHelper::ROOT, "docs/format.md")

  # format.h's event kinds: number => word.
  def format_h_kinds
    enum = File.read(FORMAT_H)[/enum gvls_event_kind \{(.*?)\};/m, 1]
    refute_nil enum, "format.h has no enum gvls_event_kind"
    enum.scan(/GVLS_EV_(\w+) = (\d+)/).to_h { |name, number| [Integer(number), name.downcase.to_sym] }
  end

  # number => word of an Array of words by number (nil: no word).
  def by_number(words) = words.each_with_index.to_h { |word, number| [number, word] }.compact

  def engine
    GVLScope::Model::Scan.load! # the one reader: a one-line error if the engine is not compiled
    GVLScope::Engine
  end

  def test_event_kinds_are_format_hs
    kinds = format_h_kinds
    assert_equal %i[started ready resumed suspended exited gc_enter gc_exit arg sample turn_begin turn_end turn_site turn_ready],
                 kinds.values
    assert_equal kinds, by_number(GVLScope::Vocabulary::EVENT_KINDS)
    assert_equal kinds, by_number(engine::EVENT_KINDS)
    events = kinds.invert.except(:arg, :sample, :turn_begin, :turn_end, :turn_site, :turn_ready)
    assert_equal events, GVLScope::Model::GvlWriter::KIND_CODES
    assert_equal events.keys, GVLScope::Model::TraceFile::EVENTS.compact
    assert_equal kinds.invert, SyntheticTrace::KIND
  end

  # probe.c counts the kinds from 1 to GVLS_EV_EXITED, Probe::KINDS names them.
  def test_the_probe_counts_format_hs_thread_events
    probe_c = File.read(File.join(GVLScopeTestHelper::ROOT, "ext/gvlscope/probe.c"))
    assert_match(/enum \{ PROBE_KINDS = GVLS_EV_EXITED \}/, probe_c)
    assert_equal (1..format_h_kinds.key(:exited)).map { |number| format_h_kinds[number] }, GVLScope::Probe::KINDS
  end

  def test_the_format_doc_tells_format_hs_kinds
    doc = File.read(FORMAT_MD)
    told = doc[/^Kinds: (.*?);/m, 1].scan(/(\d+) (\w+)/) + doc.scan(/^- \*\*(\d+) (\w+)\*\*/)
    assert_equal format_h_kinds, told.to_h { |number, name| [Integer(number), name.downcase.to_sym] }
  end

  def test_engine_states_and_reasons_are_the_engines
    assert_equal engine::STATES, GVLScope::Model::Scan::STATES
    assert_equal engine::LANE_STATES, GVLScope::Analysis::Overview::STATES
    assert_equal engine::REASONS, GVLScope::Model::Scan::REASONS
  end

  # The engine's states and reasons are the Vocabulary's words, in its order (a state or reason
  # added to one and not the other fails here).
  def test_engine_words_are_the_vocabularys
    vocabulary = GVLScope::Vocabulary
    assert_equal [nil, *vocabulary::STATES.keys, :gone], engine::STATES
    # (as a set: "unknown" is a release cause and an idle reason, numbered after "io_sleep")
    assert_equal (vocabulary::RELEASE_CAUSES.keys | vocabulary::IDLE_REASONS.keys).sort, engine::REASONS.compact.sort
  end
end
