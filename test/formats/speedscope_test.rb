# frozen_string_literal: true

require "test_helper"
require "json"
require "tmpdir"
require "gvlscope/formats/speedscope"
require_relative "../support/speedscope"
require_relative "../support/loop_turns"

# The speedscope export opened in speedscope itself (its npm package, pinned, in headless
# Chromium: test/support/speedscope.rb): it loads without an error or warning; first the holders'
# sampled profile, whose heaviest frame is the hog's method; then one profile per thread, each one
# flat row of back-to-back states, as long as the timeline says. A screenshot of the IO thread's
# Time Order view is left in tmp/speedscope-test.png.
# Run alone: bundle exec ruby -Ilib -Itest test/formats/speedscope_test.rb
class SpeedscopeTest < Minitest::Test
  include GVLScopeTestHelper
  include SpeedscopeViewer
  include LoopTurns

  CONVOY = File.join(ROOT, "test/fixtures/traces/convoy.gvl")
  STATE_NAMES = GVLScope::Vocabulary::STATES.keys.flat_map do |state|
    [nil, *GVLScope::Vocabulary::IDLE_REASONS.keys].map { |reason| GVLScope::Vocabulary.slice_name(state, reason) }
  end.uniq.freeze

  HOLDERS = GVLScope::Formats::Speedscope::HOLDERS

  def test_the_hogs_method_is_the_heaviest_holder_and_each_thread_is_one_flat_row_in_speedscope
    Dir.mktmpdir("gvlscope-speedscope") do |dir|
      trace, file = trace_and_export(dir, 'GVLWorkloads.cpu_beside_reader("cpu", 6)', "speedscope")
      timeline = GVLScope::Model.timeline(trace)
      threads = timeline.threads.values.select { |thread| drawn(thread).any? }
      json = JSON.parse(File.read(file))
      assert_samples_are_the_holders(json, timeline)
      assert_events_are_the_intervals(json, threads)

      FileUtils.mkdir_p(File.join(ROOT, "tmp"))
      screenshot = File.join(ROOT, "tmp", "speedscope-test.png")
      reader_index = threads.index { |thread| thread.label == "reader" }
      shown = open_in_speedscope(file, screenshot: screenshot, show: 1 + reader_index)

      assert_empty shown.errors, shown.log.join("\n")
      assert_empty shown.warnings, shown.log.join("\n")
      assert_equal "t.gvl - speedscope", shown.title
      assert_equal [HOLDERS, *threads.map(&:display_name)], shown.profiles.map(&:name)
      holders, *timelines = shown.profiles
      # The code that made the reader wait: the CPU thread's method, by the samples' own frames
      # (self weight: every frame below it has the same total).
      heaviest = holders.rows.max_by { |row| row.self_weight.percent }
      assert_equal "GVLWorkloads.spin", heaviest.name, holders.rows.map(&:to_a).inspect
      assert_operator heaviest.self_weight.percent, :>=, 80
      threads.zip(timelines) do |thread, profile|
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
      assert_empty ["idle (io)", "run", "wait"] - timelines[reader_index].rows.map(&:name)
      assert_operator File.size(screenshot), :>, 10_000
    end
  end

  # Why speedscope has its own export: it reads the Chrome JSON export's back-to-back "X" slices
  # as nested (ts + dur summed in floating point ends a slice after the next one began), and
  # warns while it builds the staircase. If this starts failing, speedscope reads Chrome JSON
  # right: README.md and docs/format.md say otherwise.
  def test_speedscope_nests_the_chrome_json_export_into_a_staircase
    Dir.mktmpdir("gvlscope-speedscope") do |dir|
      shown = export_and_open(dir, CONVOY, "chrome-json")
      assert_match(/Tried to end .* when .* was on the top of the stack/, shown.warnings.join("\n"))
      nested = shown.profiles.flat_map(&:rows).select { |row| row.total.percent > row.self_weight.percent + 1 }
      refute_empty nested, "no frame of the Chrome JSON export is drawn inside another any more"
    end
  end

  # loop.gvl's event loop (test/formats/fiber_views_test.rb checks the events): speedscope loads the
  # loop's fibers profile without a warning, after its thread's, and gives each fiber the time of
  # its turns (of all turns' time: speedscope's percentages are of the time a frame is open), fiber 1's long turn inside it as the code it gave the loop back in.
  def test_speedscope_shows_the_loops_fibers
    Dir.mktmpdir("gvlscope-speedscope") do |dir|
      shown = export_and_open(dir, LOOP, "speedscope")
      assert_empty shown.warnings, shown.log.join("\n")
      assert_equal ["main", LOOP_NAME, "#{LOOP_NAME}: fibers"], shown.profiles.map(&:name)
      fibers = shown.profiles.last
      busy_ns = TURNS.sum { |_, start_ns, end_ns| end_ns - start_ns }
      TURNS.group_by(&:first).each do |fiber, turns|
        row = fibers.row("fiber #{fiber}")
        assert_in_delta 100.0 * turns.sum { |_, start_ns, end_ns| end_ns - start_ns } / busy_ns, row.total.percent, 0.01, row.name
      end
      _fiber, start_ns, end_ns = TURNS[LONG_TURN]
      code = fibers.row("Object#render_report")
      assert_in_delta 100.0 * (end_ns - start_ns) / busy_ns, code.total.percent, 0.01
      assert_equal ["Object#render_report", *(1..5).map { |fiber| "fiber #{fiber}" }], fibers.rows.map(&:name).sort
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
  # +trace+ exported in +format+ into +dir+ and opened in speedscope, which showed no error.
  def export_and_open(dir, trace, format)
    file = File.join(dir, "#{File.basename(trace, '.gvl')}.#{format}.json")
    _out, err, status = gvlscope("export", trace, "--format", format, "-o", file)
    assert status.success?, err
    open_in_speedscope(file).tap { |shown| assert_empty shown.errors, shown.log.join("\n") }
  end

  def drawn(thread) = thread.intervals.select { |interval| interval.end_ns > interval.start_ns }

  # The first profile: every holder sample's stack, root first, as frames (name, file, line),
  # weighted by its waiters; back-to-back samples of one stack are one, in time order.
  def assert_samples_are_the_holders(json, timeline)
    profile = json["profiles"].first
    assert_equal ["sampled", HOLDERS, "none"], profile.values_at("type", "name", "unit")
    frames = json.dig("shared", "frames").map { |frame| frame.values_at("name", "file", "line") }
    assert_equal frames.uniq, frames
    stacks = profile["samples"].map { |sample| sample.map { |index| frames.fetch(index) } }
    expected = timeline.samples.chunk_while { |a, b| a.stack == b.stack }.map do |run|
      [run.first.stack.reverse.map(&:shown).map { |f| [f.label, f.path, f.line.positive? ? f.line : nil] }, run.sum(&:waiters)]
    end
    refute_empty expected, "no holder sample: nobody waited for the GVL"
    assert_equal expected, stacks.zip(profile["weights"])
    assert_equal profile["weights"].sum, profile["endValue"]
  end

  # The file as speedscope's importer requires it (one evented profile per thread, after the
  # holders'; each close matches the open frame; times never go back), and as flat as the
  # timeline: an open and a close per interval, at its start and end, never two frames open.
  def assert_events_are_the_intervals(json, threads)
    assert_equal GVLScope::Formats::Speedscope::SCHEMA, json["$schema"]
    frames = json.dig("shared", "frames").map { |frame| frame.fetch("name") }
    evented = json["profiles"].select { |profile| profile["type"] == "evented" }
    assert_equal threads.map(&:display_name), evented.map { |profile| profile["name"] }
    threads.zip(evented) do |thread, profile|
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
