# frozen_string_literal: true

require "gvlscope/model"

# A trace (read by the engine: Model::Scan) from a script of GVL events, exact to the nanosecond,
# for tests of what the analysis computes from given intervals (a traced program's timing varies;
# this does not).
# +events+: [[time_ms, thread name, kind], ...] with kinds of Vocabulary::EVENT_KINDS (:started,
# :ready -> wait, :resumed -> run, :suspended -> idle, :gc_enter, :gc_exit, :exited).
module ScriptedTimeline
  module_function

  def timeline(events, end_ms:, timeslice_ms: 100) = GVLScope::Model::Scan.new(file(events, end_ms: end_ms, timeslice_ms: timeslice_ms)).run

  # The trace's events (a TraceFile holding them in memory).
  def file(events, end_ms:, timeslice_ms: 100)
    names = events.map { |_, name, _| name }.uniq
    serial = names.each_with_index.to_h { |name, index| [name, index + 1] }
    info = names.to_h do |name|
      [serial[name], GVLScope::Model::ThreadInfo.new(serial: serial[name], name: name, ractor_id: 0, main: false)]
    end
    ordered = events.sort_by.with_index { |(ms, _, _), index| [ms, index] }
    GVLScope::Model::TraceFile.from_events(
      path: "scripted.gvl", pid: 1, timeslice_ns: timeslice_ms * 1_000_000,
      times: ordered.map { |ms, _, _| (ms * 1_000_000).round }, kinds: ordered.map(&:last),
      threads: ordered.map { |_, name, _| serial[name] }, thread_info: info, end_ns: end_ms * 1_000_000
    )
  end
end
