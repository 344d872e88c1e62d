# frozen_string_literal: true

require "test_helper"
require "tmpdir"
require_relative "../support/firefox_profiler"
require_relative "../support/loop_turns"

# The firefox export opened by the Firefox Profiler itself: the profile-viewer gem's copy of its
# app, in headless Chromium (test/support/firefox_profiler.rb). What it draws of hog.gvl: a track
# per thread, the main thread's GVL states in the marker table, the spinning thread's holder
# samples as its call tree. (test/formats/firefox_test.rb checks the format and the numbers.)
# Run alone: bundle exec ruby -Ilib -Itest test/formats/firefox_profiler_test.rb
class FirefoxProfilerTest < Minitest::Test
  include GVLScopeTestHelper
  include FirefoxProfilerViewer
  include LoopTurns

  # docs/format.md's offline route installs the version drawn here and opens the export with it.
  def test_the_docs_offline_route_is_this_viewer
    docs = File.read(File.join(ROOT, "docs/format.md"))
    assert_includes docs, "gem install #{GEM} -v #{VERSION}"
    assert_includes docs, "#{GEM} app.firefox.json"
  end

  def test_the_firefox_profiler_draws_it
    Dir.mktmpdir("gvlscope-firefox") do |dir|
      path = File.join(dir, "hog.firefox.json")
      _out, err, status = gvlscope("export", File.join(ROOT, "test/fixtures/traces/hog.gvl"), "--format", "firefox", "-o", path)
      assert status.success?, err
      # The marker table of the selected (main) thread: its states, each with its details.
      page = open_in_firefox_profiler(path, "marker-table")
      assert_includes page, "gvlscope #{GVLScope::VERSION}: hog.gvl", page.first(20).join("\n")
      %w[main echo\ (hog.rb:16) thread\ 2\ (hog.rb:15)].each { |name| assert_includes page, name, "a track per thread" }
      table = page.drop_while { |line| line != "Details" }
      refute_empty table, "no marker table:\n#{page.join("\n")}"
      assert_includes table, "idle (join)"
      assert_includes table, "wait"
      assert_includes table, "run join"

      # The spinning thread's call tree: its holder samples, Counter#spin under block in <main>.
      page = open_in_firefox_profiler(path, "calltree", "thread=1")
      tree = page.drop_while { |line| !line.start_with?("Complete ") }
      assert_equal ["block in <main>", "hog.rb", "Counter#spin", "hog.rb"],
                   tree.select { |line| line.match?(/\A(block in <main>|Counter#spin|hog\.rb)\z/) }.first(4), tree.first(40).join("\n")
    end
  end

  # loop.gvl's event loop (test/formats/fiber_views_test.rb checks the format): the profiler lists
  # a marker "fiber N" per turn on the loop's thread, with the turn's duration, between its GVL
  # states, and the long turn's details name the code its fiber gave the loop back in.
  def test_the_firefox_profiler_lists_the_loops_turns
    Dir.mktmpdir("gvlscope-firefox") do |dir|
      path = File.join(dir, "loop.firefox.json")
      _out, err, status = gvlscope("export", File.join(ROOT, "test/fixtures/traces/loop.gvl"), "--format", "firefox", "-o", path)
      assert status.success?, err
      page = open_in_firefox_profiler(path, "marker-table", "thread=1")
      table = page.drop_while { |line| line != "Details" }.drop(1)
      refute_empty table, "no marker table:\n#{page.join("\n")}"
      # The rows' start, duration and name, then (a column of its own in the page) their details.
      rows = table.take_while { |line| line != "exited" }.each_slice(3).select { |row| row.size == 3 }
      turns = rows.select { |_start, _duration, name| name.start_with?("fiber ") }
      fibers = TURNS.map { |fiber, _start, _end| "fiber #{fiber}" }
      assert_equal fibers, turns.map(&:last), rows.inspect
      assert_equal %w[66.992μs 2.421μs 1.931μs 1.091μs 56.766μs 60.355ms 236.97μs 97.211μs 64.050μs 161.31μs 101.70μs],
                   turns.map { |_start, duration, _name| duration }
      details = table.drop(rows.size * 3).select { |line| line.start_with?("fiber ") }
      expected = fibers.each_with_index.map { |name, i| i == LONG_TURN ? "#{name} #{CODE}" : name }
      assert_equal expected, details
    end
  end
end
