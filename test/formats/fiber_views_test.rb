# frozen_string_literal: true

require "test_helper"
require "json"
require "tmpdir"
require "gvlscope/model"
require "gvlscope/formats/chrome_json"
require "gvlscope/formats/firefox"
require "gvlscope/formats/speedscope"
require_relative "../support/loop_turns"

# The event loop's turns in each viewer's export (docs/fibers.md, "In a trace"), from loop.gvl (a
# real loop: test/fixtures/traces/loop.rb, lab/tiny_scheduler.rb): the same turns Model::Turns
# gives the Perfetto export, each from its start to its end, named by its fiber.
# (test/formats/firefox_profiler_test.rb and speedscope_test.rb open them in the real viewers.)
class FiberViewsTest < Minitest::Test
  include GVLScopeTestHelper

  include LoopTurns

  def timeline = GVLScope::Model.timeline(LOOP)

  def test_the_fixtures_turns_are_the_models
    turns = timeline.turns
    assert_equal TURNS, turns.map { |turn| [turn.fiber, turn.start_ns, turn.end_ns] }
    assert_equal [LOOP_THREAD], turns.map(&:thread).uniq
    assert_equal [CODE], turns.filter_map(&:given_back_label)
    assert_equal CODE, turns[LONG_TURN].given_back_label
  end

  # A track "<thread>: fibers" (a tid of its own) with a complete event per turn; ts and dur in
  # µs, as the GVL states'.
  def test_chrome_json_draws_each_turn_on_the_loops_fibers_track
    events = JSON.parse(GVLScope::Formats::ChromeJSON.new(timeline).to_s).fetch("traceEvents")
    tid = GVLScope::Formats::ChromeJSON::FIBERS_TID_OFFSET + LOOP_THREAD
    assert_includes events, { "ph" => "M", "name" => "thread_name", "pid" => 1, "tid" => tid,
                              "args" => { "name" => "#{LOOP_NAME}: fibers" } }
    turns = events.select { |event| event["tid"] == tid && event["ph"] == "X" }
    expected = TURNS.each_with_index.map do |(fiber, start_ns, end_ns), index|
      { "ph" => "X", "name" => "fiber #{fiber}", "pid" => 1, "tid" => tid, "ts" => (start_ns / 1000r).to_f,
        "dur" => ((end_ns - start_ns) / 1000r).to_f, "args" => { "fiber" => fiber, **(index == LONG_TURN ? { "code" => CODE } : {}) } }
    end
    assert_equal expected, turns
    assert_equal [LOOP_THREAD], events.select { |event| event["ph"] == "X" && event["name"].start_with?("run") }
                                      .map { |event| event["tid"] }.uniq - [1], "the GVL states stay on the thread's own track"
  end

  # An interval marker "fiber N" per turn on the loop's thread, after its GVL states, with a
  # "Fiber" schema; a trace without turns has no such schema.
  def test_firefox_marks_each_turn_on_the_loops_thread
    json = JSON.parse(GVLScope::Formats::Firefox.new(timeline).to_s)
    assert_equal %w[GVL Fiber], json.dig("meta", "markerSchema").map { |schema| schema["name"] }
    thread = json["threads"].find { |candidate| candidate["tid"] == LOOP_THREAD }
    markers = thread["markers"]
    strings = thread["stringArray"]
    columns = %w[startTime endTime name data category phase].map { |key| markers[key] }
    assert_equal [markers["length"]], columns.map(&:size).uniq
    fibers = columns.transpose.select { |_, _, _, data| data["type"] == "Fiber" }
    expected = TURNS.each_with_index.map do |(fiber, start_ns, end_ns), index|
      [(start_ns / 1_000_000r).to_f, (end_ns / 1_000_000r).to_f, "fiber #{fiber}",
       { "type" => "Fiber", "fiber" => fiber, **(index == LONG_TURN ? { "code" => CODE } : {}) }, 5, 1]
    end
    assert_equal expected, fibers.map { |start, finish, name, *rest| [start, finish, strings[name], *rest] }
    main = json["threads"].find { |candidate| candidate["tid"] == 1 }
    assert(main["markers"]["data"].none? { |data| data["type"] == "Fiber" }, "the main thread had no loop")

    plain = JSON.parse(GVLScope::Formats::Firefox.new(GVLScope::Model.timeline(File.join(ROOT, "test/fixtures/traces/hog.gvl"))).to_s)
    assert_equal %w[GVL], plain.dig("meta", "markerSchema").map { |schema| schema["name"] }
  end

  # After the loop thread's profile, a profile "<thread>: fibers": "fiber N" open for each turn,
  # and inside the long turn the frame its fiber gave the loop back in.
  def test_speedscope_has_a_fibers_profile_after_the_loops_thread
    json = JSON.parse(GVLScope::Formats::Speedscope.new(timeline).to_s)
    assert_equal ["main", LOOP_NAME, "#{LOOP_NAME}: fibers"], json["profiles"].map { |profile| profile["name"] }
    frames = json.dig("shared", "frames")
    profile = json["profiles"].last
    assert_equal %w[evented nanoseconds], profile.values_at("type", "unit")
    code = { "name" => "Object#render_report", "file" => "loop.rb", "line" => 13 }
    expected = TURNS.each_with_index.flat_map do |(fiber, start_ns, end_ns), index|
      name = { "name" => "fiber #{fiber}" }
      if index == LONG_TURN
        [["O", name, start_ns], ["O", code, start_ns], ["C", code, end_ns], ["C", name, end_ns]]
      else
        [["O", name, start_ns], ["C", name, end_ns]]
      end
    end
    assert_equal expected, profile["events"].map { |event| [event["type"], frames.fetch(event["frame"]), event["at"]] }
  end
end
