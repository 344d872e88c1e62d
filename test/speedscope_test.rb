# frozen_string_literal: true

require "test_helper"
require "json"
require "tmpdir"
require "gvlscope/formats/speedscope"
require_relative "support/speedscope"

# The speedscope export opened in speedscope itself (its npm package, pinned, in headless
# Chromium: test/support/speedscope.rb): it loads without an error or warning, has one profile per
# thread, and each thread is one flat row of back-to-back states, as long as the timeline says. A
# screenshot of the IO thread's Time Order view is left in tmp/speedscope-test.png.
# Run alone: bundle exec ruby -Ilib -Itest test/speedscope_test.rb
class SpeedscopeTest < Minitest::Test
  include GVLScopeTestHelper
  include SpeedscopeViewer

  CONVOY = File.join(ROOT, "test/fixtures/traces/convoy.gvl")
  STATE_NAMES = GVLScope::Vocabulary::STATES.keys.flat_map do |state|
    [nil, *GVLScope::Vocabulary::IDLE_REASONS.keys].map { |reason| GVLScope::Vocabulary.slice_name(state, reason) }
  end.uniq.freeze

  def test_each_thread_is_one_flat_row_in_speedscope
    Dir.mktmpdir("gvlscope-speedscope") do |dir|
      trace = File.join(dir, "t.gvl")
      trace_program(trace, 'GVLWorkloads.cpu_beside_reader("cpu", 6)')
      _out, err, status = gvlscope("export", trace, "--format", "speedscope")
      assert status.success?, err
      file = File.join(dir, "t.speedscope.json")
      timeline = GVLScope::Model.timeline(trace)
      threads = timeline.threads.values.select { |thread| drawn(thread).any? }
      assert_events_are_the_intervals(JSON.parse(File.read(file)), threads)

      FileUtils.mkdir_p(File.join(ROOT, "tmp"))
      screenshot = File.join(ROOT, "tmp", "speedscope-test.png")
      reader_index = threads.index { |thread| thread.label == "reader" }
      shown = open_in_speedscope(file, screenshot: screenshot, show: reader_index)

      assert_empty shown.errors, shown.log.join("\n")
      assert_empty shown.warnings, shown.log.join("\n")
      assert_equal "t.gvl - speedscope", shown.title
      assert_equal threads.map(&:label), shown.profiles.map(&:name)
      threads.zip(shown.profiles) do |thread, profile|
        assert_flat(profile)
        expected = drawn(thread).group_by { |i| GVLScope::Vocabulary.slice_name(i.state, i.reason) }
        assert_equal expected.keys.sort, profile.rows.map(&:name).sort, thread.label
        # speedscope's percentages are of the time a frame is open (the thread's life).
        life_ns = drawn(thread).sum(&:duration_ns)
        expected.each do |name, intervals|
          percent = 100.0 * intervals.sum(&:duration_ns) / life_ns
          assert_in_delta percent, profile.row(name).self_weight.percent, 0.01, "#{thread.label}: #{name}"
        end
      end
      # A trace with stacks: the reader's release site (IO#read) names its idle reason.
      assert_empty ["idle (io)", "run", "wait"] - shown.profiles[reader_index].rows.map(&:name)
      assert_operator File.size(screenshot), :>, 10_000
    end
  end

  # Why speedscope has its own export: it reads the Chrome JSON export's back-to-back "X" slices
  # as nested (ts + dur summed in floating point ends a slice after the next one began), and
  # warns while it builds the staircase. If this starts failing, speedscope reads Chrome JSON
  # right: README.md and docs/format.md say otherwise.
  def test_speedscope_nests_the_chrome_json_export_into_a_staircase
    Dir.mktmpdir("gvlscope-speedscope") do |dir|
      chrome_json = File.join(dir, "convoy.json")
      _out, err, status = gvlscope("export", CONVOY, "--format", "chrome-json", "-o", chrome_json)
      assert status.success?, err
      shown = open_in_speedscope(chrome_json)
      assert_empty shown.errors, shown.log.join("\n")
      assert_match(/Tried to end .* when .* was on the top of the stack/, shown.warnings.join("\n"))
      nested = shown.profiles.flat_map(&:rows).select { |row| row.total.percent > row.self_weight.percent + 1 }
      refute_empty nested, "no frame of the Chrome JSON export is drawn inside another any more"
    end
  end

  # The probe sees speedscope refuse a file: closes out of order (a staircase written by us) are
  # an import error, which the first test would report.
  def test_a_file_speedscope_refuses_is_an_error
    Dir.mktmpdir("gvlscope-speedscope") do |dir|
      broken = JSON.parse(GVLScope::Formats::Speedscope.new(GVLScope::Model.timeline(CONVOY)).to_s)
      events = broken["profiles"][0]["events"]
      events[1], events[2] = events[2], events[1] # the second interval opens before the first closes
      path = File.join(dir, "broken.speedscope.json")
      File.write(path, JSON.generate(broken))
      shown = open_in_speedscope(path)
      assert_match(/Tried to leave frame/, shown.errors.join("\n"))
    end
  end

  private

  # What a thread's row shows: its intervals but the zero-length exit marker.
  def drawn(thread) = thread.intervals.select { |interval| interval.end_ns > interval.start_ns }

  # The file as speedscope's importer requires it (one evented profile per thread; each close
  # matches the open frame; times never go back), and as flat as the timeline: an open and a
  # close per interval, at its start and end, never two frames open.
  def assert_events_are_the_intervals(json, threads)
    assert_equal GVLScope::Formats::Speedscope::SCHEMA, json["$schema"]
    frames = json.dig("shared", "frames").map { |frame| frame.fetch("name") }
    assert_equal frames.uniq, frames
    assert_equal threads.map(&:label), json["profiles"].map { |profile| profile["name"] }
    threads.zip(json["profiles"]) do |thread, profile|
      assert_equal %w[evented nanoseconds], profile.values_at("type", "unit")
      expected = drawn(thread).flat_map do |interval|
        name = GVLScope::Vocabulary.slice_name(interval.state, interval.reason)
        [["O", name, interval.start_ns], ["C", name, interval.end_ns]]
      end
      actual = profile["events"].map { |event| [event["type"], frames.fetch(event["frame"]), event["at"]] }
      assert_equal expected, actual, thread.label
      times = actual.map(&:last)
      assert_equal times.sort, times, "#{thread.label}: times go back"
      assert_operator times.last, :<=, profile["endValue"]
    end
  end

  # Drawn flat: no frame has time inside another, so each frame's total time is its self time.
  def assert_flat(profile)
    refute_empty profile.rows, profile.name
    profile.rows.each do |row|
      assert_includes STATE_NAMES, row.name
      assert_equal row.total.to_a, row.self_weight.to_a, "#{profile.name}: '#{row.name}' is drawn inside another frame"
    end
  end
end
