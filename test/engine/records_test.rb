# frozen_string_literal: true

require_relative "../test_helper"
require "gvlscope"
require "gvlscope/model"
require "gvlscope/analysis"

# The records the engine hands to Ruby are Structs under GVLScope::Engine, each made from one list
# in ext/gvlscope_engine/engine.c (ENG_THREAD_ROW, ...): Ruby reads them by name. These pin the
# names Ruby reads, so a column renamed or dropped in C fails here, not in a report.
class RecordsTest < Minitest::Test
  def engine
    GVLScope::Model::Scan.load!
    GVLScope::Engine
  end

  def test_each_record_is_a_struct_of_its_list
    {
      IndexSummary: %i[events stack_records last_time bad_kind bad_byte],
      TurnColumns: %i[times serials kinds values],
      Memory: %i[current_bytes peak_bytes spill_bytes],
      Histograms: %i[hold_ns wait_ns],
      BlameRow: %i[waiter holder all_ns all_seq after_blocking_ns after_blocking_seq],
      SampleColumns: %i[times holders stack_ids waiters],
      CodeRow: %i[thread stack_id weight count seq],
      ReleaseSiteRow: %i[thread site_id reason waited_ns releases],
      WindowRow: %i[thread state reason start_ns end_ns native site_id index],
      WindowColumns: %i[serials states reasons starts ends],
    }.each do |name, fields|
      record = engine.const_get(name)
      assert_operator record, :<, Struct, name
      assert_equal fields, record.members, name
    end
  end

  # ThreadStats::Row takes the engine's sums by name: every one it copies is a ThreadRow member,
  # and the ThreadRow members it leaves are the ones Blame, Scan#drawn? and the Row's own fields read.
  def test_thread_stats_reads_thread_row_by_name
    stats = GVLScope::Analysis::ThreadStats
    copied = stats::SUMMED + stats::SPANS + stats::OFF_CPU + %i[serial ractor_id released_by idle_by_reason]
    members = engine::ThreadRow.members
    assert_empty copied - members
    assert_equal %i[first_wait first_after_blocking first_gc during_gc_ns drawn], members - copied
    assert_empty copied - stats::Row.members
  end

  def test_rows_of_a_trace
    scan = GVLScope::Model::Scan.open(File.join(GVLScopeTestHelper::ROOT, "test/fixtures/traces/convoy.gvl"))
    rows = scan.thread_rows.values
    refute_empty rows
    assert(rows.all?(engine::ThreadRow))
    assert_equal scan.threads.keys.first(rows.size), rows.map(&:serial)
    assert(rows.all? { |row| row.run_ns + row.wait_ns + row.idle_ns + row.gc_ns <= scan.duration_ns })
    assert_instance_of engine::Memory, scan.instance_variable_get(:@index).memory
    assert_operator scan.peak_bytes, :>, 0
  end
end
