# frozen_string_literal: true

require "test_helper"
require "open3"
require "rbconfig"
require "tmpdir"
require "fileutils"

# lib/'s Ruby files load each other without a circle and in the data path's order
# (script/check-ruby-layers; docs/architecture.md, "Ruby's stages"): the live view reads analysis,
# never the other way, so `gvlscope report` loads no live client.
class RubyLayersTest < Minitest::Test
  include GVLScopeTestHelper

  SCRIPT = File.join(ROOT, "script/check-ruby-layers")

  def check(*args)
    Open3.capture2e(RbConfig.ruby, SCRIPT, *args)
  end

  def test_lib_has_no_circle_and_no_stage_reaching_up
    out, status = check
    assert status.success?, "script/check-ruby-layers:\n#{out}"
    assert_match(/^no circle, no stage reaching up /, out)
  end

  # A circle like the one the live view closed (live/rules.rb -> analysis -> live/snapshot.rb):
  # analysis/rule.rb loading a live snapshot, in a copy of lib/.
  def test_it_finds_a_circle_added_to_a_copy_of_lib
    Dir.mktmpdir("gvlscope-ruby-layers") do |dir|
      FileUtils.cp_r(File.join(ROOT, "lib"), dir)
      lib = File.join(dir, "lib")
      rule = File.join(lib, "gvlscope/analysis/rule.rb")
      File.write(rule, File.read(rule).sub(%(require_relative "finding"\n), %(require_relative "finding"\nrequire_relative "../live/snapshot"\n)))
      out, status = check("--lib", lib)
      assert_equal 1, status.exitstatus, out
      assert_match(%r{^circle \d: gvlscope/analysis\.rb, .*gvlscope/analysis/rule\.rb, .*gvlscope/live/rules\.rb, gvlscope/live/snapshot\.rb$}, out)
      assert_match(%r{^  gvlscope/analysis/rule\.rb:\d+ -> gvlscope/live/snapshot\.rb$}, out)
      assert_match(%r{^  gvlscope/live/snapshot\.rb:\d+ -> gvlscope/live/rules\.rb$}, out)
      assert_match(%r{^  gvlscope/live/rules\.rb:\d+ -> gvlscope/analysis\.rb$}, out)
      assert_match(%r{^reaches up: gvlscope/analysis/rule\.rb:\d+ \(analysis\) -> gvlscope/live/snapshot\.rb \(live\)$}, out)
      refute_match(/^no circle/, out)
    end
  end

  # A small lib/: a circle inside one stage (through a require inside a method and an autoload),
  # a load up a stage without a circle, and a file in no stage.
  def test_it_finds_circles_reaches_and_unstaged_files_in_a_small_example
    Dir.mktmpdir("gvlscope-ruby-layers") do |lib|
      write = lambda do |name, text|
        FileUtils.mkdir_p(File.dirname(File.join(lib, name)))
        File.write(File.join(lib, name), text)
      end
      write.("gvlscope/model/a.rb", %(require_relative "b"\n))
      write.("gvlscope/model/b.rb", %(module M\n  def self.c\n    require "gvlscope/model/c"\n  end\nend\n))
      write.("gvlscope/model/c.rb", %(module M\n  autoload :A, File.expand_path("a", __dir__)\nend\n))
      write.("gvlscope/support/units.rb", %(require_relative "../formats/d" # up\n))
      write.("gvlscope/formats/d.rb", %(# require_relative "../support/units" is a comment, no edge\n))
      write.("gvlscope/elsewhere.rb", "")
      write.("gvlscope/formats/e.rb", %(require_relative "../support/moved_away"\nrequire_relative "../gvlscope_engine"\n))
      out, status = check("--lib", lib)
      assert_equal 1, status.exitstatus, out
      assert_match(%r{^circle 1: gvlscope/model/a\.rb, gvlscope/model/b\.rb, gvlscope/model/c\.rb$}, out)
      assert_match(%r{^  gvlscope/model/b\.rb:3 -> gvlscope/model/c\.rb$}, out)
      assert_match(%r{^  gvlscope/model/c\.rb:2 -> gvlscope/model/a\.rb$}, out)
      assert_match(%r{^reaches up: gvlscope/support/units\.rb:1 \(support\) -> gvlscope/formats/d\.rb \(formats\)$}, out)
      assert_match(%r{^no stage: gvlscope/elsewhere\.rb }, out)
      # A line naming a file that is not there (a C extension is built, not in the tree: no fault).
      assert_equal ["no such file: gvlscope/formats/e.rb:1 -> ../support/moved_away"], out.lines.map(&:chomp).grep(/^no such file/)
      refute_match(/circle 2/, out)

      # Without the way back to a.rb, the units.rb reach and elsewhere.rb: none.
      write.("gvlscope/model/c.rb", "module M; end\n")
      write.("gvlscope/support/units.rb", "")
      File.delete(File.join(lib, "gvlscope/elsewhere.rb"))
      File.delete(File.join(lib, "gvlscope/formats/e.rb"))
      out, status = check("--lib", lib)
      assert status.success?, out
      assert_match(/^no circle, no stage reaching up \(5 files, 2 edges, 0 known\)$/, out)
    end
  end

  # `gvlscope report FILE` reads a trace: nothing of the live view (its client, scraper, snapshots).
  # thrash.gvl's findings quote `gvlscope advise`, whose inputs once loaded live/snapshot.rb.
  def test_report_loads_nothing_live
    trace = File.join(ROOT, "test/fixtures/traces/thrash.gvl")
    out, err, status = run_ruby(<<~RUBY, trace)
      require "stringio"
      require "gvlscope/cli"
      out = StringIO.new
      $stdout = out
      code = GVLScope::CLI.start(["report", ARGV[0]])
      $stdout = STDOUT
      abort "report exited \#{code}" unless code.nil? || code.zero?
      puts $LOADED_FEATURES.grep(%r{/lib/gvlscope/})
    RUBY
    assert status.success?, err
    loaded = out.lines.map(&:chomp)
    assert loaded.any? { |f| f.end_with?("/lib/gvlscope/analysis/report.rb") }, out
    assert loaded.any? { |f| f.end_with?("/lib/gvlscope/analysis/advisor_inputs.rb") }, out
    assert_empty loaded.grep(%r{/lib/gvlscope/live(\.rb|/)}), "gvlscope report loaded the live view"
  end
end
