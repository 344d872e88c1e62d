# frozen_string_literal: true

require "test_helper"
require "gvlscope/live"
require "gvlscope/formats/top_text"
require "gvlscope/top/screen"
require "stringio"

# `gvlscope top` laid out for the terminal's width: at 80 columns the CODE column is still there
# (the ms columns give way), and a finding longer than a line is wrapped whole, not cut.
class TopLayoutTest < Minitest::Test
  FINDING = "Hog: 'puma srv tp 002' gave up the GVL at the end of its timeslice 23 of 23 times while other " \
            "threads waited 4918 ms for it"

  def frame(width)
    row = GVLScope::Live::Snapshot::ThreadRow.new(
      serial: 6, label: "thread 6 (busy_app.rb:28)", ractor_id: 1, state: :run, exited: false, run_ns: 950_000_000,
      wait_ns: 0, idle_ns: 0, gc_ns: 0, holds: 1, waits: 1, longest_hold_ns: 1, longest_wait_ns: 0, released_blocking: 0,
      released_preempted: 1, released_exit: 0, code: { "holding" => "`Object#burn` (config.ru:12)" }
    )
    snapshot = GVLScope::Live::Snapshot.new(source: "socket", pid: 1, time_ns: 1, wall_ns: 1_000_000_000,
                                            interval_ns: 1_000_000_000, held_ns: 950_000_000, wait_ns: 0, threads: [row])
    GVLScope::Formats::TopText::Frame.new(snapshot: snapshot, target: "pid 1 (puma 8.0.2 (tcp://0.0.0.0:9292) [app])",
                                          sort: "wait", paused: false, findings: [["12:00:01", { "title" => FINDING }]],
                                          keys: true, note: nil, clock: "12:00:02", width: width)
  end

  def test_at_80_columns_the_code_column_stays_and_findings_wrap
    lines = GVLScope::Formats::TopText.new(frame(80)).to_s.lines(chomp: true)
    assert_empty lines.reject { |line| line.size < 80 }, "every line fits in 79 columns (curses leaves the last alone)"
    header = lines.find { |line| line.start_with?("THREAD") }
    assert_match(/ CODE\z/, header)
    assert_match(/\Athread 6 \(busy_app\.rb:28\) .*`Object#b.*\.ru:12\)\z/, lines.find { |line| line.start_with?("thread 6") })
    at = lines.index { |line| line.include?("12:00:01") }
    finding = lines[at..].take_while { |line| !line.empty? }.map(&:strip).join(" ")
    assert_equal "12:00:01 #{FINDING}", finding.squeeze(" ")
  end

  # Nothing installs the curses gem (it builds against ncurses): without it top says how to get
  # it, once, and goes on with plain frames.
  def test_without_curses_top_says_how_to_get_it_and_prints_plain_frames
    err = StringIO.new
    screen = GVLScope::Top::Screen
    missing = ->(name) { raise LoadError, "cannot load such file -- #{name}" }
    view = screen.stub(:require, missing) { screen.open(err) }
    assert_nil view
    assert_equal "gvlscope top: the interactive view needs the curses gem, which is not installed " \
                 "(gem install curses, or add it to the Gemfile); printing plain frames\n", err.string
  end

  def test_a_wide_terminal_or_a_pipe_shows_the_ms_columns
    [nil, 160].each do |width|
      header = GVLScope::Formats::TopText.new(frame(width)).to_s.lines(chomp: true).find { |line| line.start_with?("THREAD") }
      assert_match(/ RUN +WAIT +IDLE +CODE\z/, header, "width #{width.inspect}")
    end
  end

  # 'pricer' burns the CPU for a second; six workers that block on IO wait about a timeslice for
  # each acquisition behind it.
  def hog_and_six_workers
    thread = ->(serial, label, **counts) do
      GVLScope::Live::Snapshot::ThreadRow.new(
        serial: serial, label: label, ractor_id: 1, state: :wait, exited: false, run_ns: 0, wait_ns: 0, idle_ns: 0, gc_ns: 0,
        holds: 0, waits: 0, longest_hold_ns: 0, longest_wait_ns: 0, released_blocking: 0, released_preempted: 0,
        released_exit: 0, code: nil, **counts
      )
    end
    rows = [thread.(1, "pricer", run_ns: 990_000_000, holds: 10, released_preempted: 10)] +
           (1..6).map { |n| thread.(n + 1, "worker #{n}", run_ns: 100_000, wait_ns: 900_000_000, waits: 9, released_blocking: 9) }
    GVLScope::Live::Snapshot.new(source: "socket", pid: 1, time_ns: 1, wall_ns: 1_000_000_000, interval_ns: 1_000_000_000,
                                 held_ns: 990_600_000, wait_ns: 5_400_000_000, threads: rows, timeslice_ns: 100_000_000)
  end

  # As the report groups convoys by holder (Rules::Convoy.by_holder), so does top: six workers
  # behind 'pricer' are one convoy, not six lines that push the hog off the list.
  def test_convoys_behind_one_holder_are_one_finding
    findings = GVLScope::Live::Rules.findings(hog_and_six_workers)
    assert_equal %w[hog convoy], findings.map { |finding| finding["kind"] }.first(2)
    convoy = findings[1]
    assert_equal "pricer", convoy["holder"]
    assert_equal ["worker 1", "worker 2", "worker 3", "worker 4", "worker 5", "worker 6", "pricer"], convoy["threads"]
    assert_equal "Convoy: 6 threads ('worker 1', 'worker 2', 'worker 3' and 3 more) waited for the GVL 100 ms per " \
                 "acquisition on average (54 waits, 5400 ms in all, timeslice 100 ms) after their blocking calls; " \
                 "'pricer' held the GVL 99% of the interval", convoy["title"]
  end

  # However many findings come after it, a hog stays on screen: it is what the others wait behind.
  def test_a_hog_never_falls_off_the_findings
    hog = ["12:00:01", { "kind" => "hog", "title" => FINDING }]
    later = (1..8).map { |n| ["12:00:0#{n + 1}", { "kind" => "convoy", "title" => "Convoy: 'w#{n}'" }] }
    frame = frame(nil).tap { |f| f.findings = [hog, *later] }
    lines = GVLScope::Formats::TopText.new(frame).to_s.lines(chomp: true)
    shown = lines.drop_while { |line| !line.start_with?("findings") }.drop(1).take_while { |line| !line.empty? }
    assert_equal ["  12:00:01  #{FINDING}", *(4..8).map { |n| "  12:00:0#{n + 1}  Convoy: 'w#{n}'" }], shown
  end
end
