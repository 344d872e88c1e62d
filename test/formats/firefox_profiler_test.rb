# frozen_string_literal: true

require "test_helper"
require "tmpdir"
require_relative "../support/firefox_profiler"

# The firefox export opened by the Firefox Profiler itself: the profile-viewer gem's copy of its
# app, in headless Chromium (test/support/firefox_profiler.rb). What it draws of hog.gvl: a track
# per thread, the main thread's GVL states in the marker table, the spinning thread's holder
# samples as its call tree. (test/formats/firefox_test.rb checks the format and the numbers.)
# Run alone: bundle exec ruby -Ilib -Itest test/formats/firefox_profiler_test.rb
class FirefoxProfilerTest < Minitest::Test
  include GVLScopeTestHelper
  include FirefoxProfilerViewer

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

end
