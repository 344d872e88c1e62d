# frozen_string_literal: true

require_relative "../test_helper"
require "tmpdir"

# The tree is the data path (docs/architecture.md): each file under lib/ requires what it uses,
# and the words for thread states are the same in C and in Ruby.
class LayoutTest < Minitest::Test
  LIB = File.join(GVLScopeTestHelper::ROOT, "lib")
  include GVLScopeTestHelper

  # Each file in a fresh process (forked from a Ruby that loaded nothing of gvlscope), with
  # warnings on: a NameError, a missing require or a circular require fails the test.
  def test_every_lib_file_loads_alone
    files = Dir[File.join(LIB, "**/*.rb")].sort
    assert_operator files.size, :>=, 40
    code = <<~RUBY
      $VERBOSE = true
      failures = []
      ARGV.each do |file|
        reader, writer = IO.pipe
        pid = fork do
          reader.close
          $stderr.reopen(writer)
          require file
          exit!(0)
        rescue Exception => e
          writer.puts "\#{e.class}: \#{e.message.lines.first}"
          exit!(1)
        end
        writer.close
        messages = reader.read
        _, status = Process.wait2(pid)
        complaints = messages.lines.grep(/circular require|Error|already initialized|method redefined/)
        failures << "\#{file}: \#{complaints.join.strip}" unless status.success? && complaints.empty?
      end
      puts failures
    RUBY
    # autorun starts a trace as it loads: give it a place to write.
    Dir.mktmpdir("gvlscope-layout") do |dir|
      out, err, status = run_ruby(code, *files, env: { "GVLSCOPE_OUTPUT" => File.join(dir, "t-%p.gvl") })
      assert status.success?, err
      assert_empty out, "files that do not load alone"
    end
  end

  def test_thread_states_are_the_same_words_in_c_and_ruby
    assert_equal GVLScope::Vocabulary::METRIC_STATES, GVLScope::Native::STATES # event kinds: test/engine/numbering_test.rb
  end

  # The HTML viewer colours every code the report writes, and nothing else.
  def test_the_viewer_knows_every_state
    require "gvlscope/formats/report_html"
    viewer = File.read(File.join(LIB, "gvlscope/formats/report_html/viewer.js"))
    colours = viewer[/const COLORS = \{(.*?)\};/m, 1].scan(/(\w+):/).flatten.map(&:to_sym)
    assert_equal GVLScope::Formats::ReportHTML::CODES.keys.sort, colours.sort
  end

  # Each stage has its folder; the top level holds the live API and the public require paths.
  def test_stages_have_their_folders
    top = Dir[File.join(LIB, "gvlscope/*.rb")].map { |f| File.basename(f, ".rb") }.sort
    # Beside the public require paths, the helpers every stage shares (units, vocabulary, printable
    # names, a private directory's checks, the one-copy guard and the Ruby check of the entry files,
    # the rule of every file a command writes).
    assert_equal %w[analysis autorun breakdown callbacks cli errors event_loops flight_recorder fork formats lab live metrics model native
                    one_copy output_file printable private_dir probe progress rack request_timing sidekiq supported_ruby trace units
                    version vocabulary yabeda], top
    %w[model analysis analysis/rules formats integrations lab live].each do |dir|
      assert File.directory?(File.join(LIB, "gvlscope", dir)), dir
    end
  end

  # test/ mirrors the stages (one folder per stage, as in lib/ and ext/), so a new test has one
  # obvious home; gem/ holds the checks of the whole gem. No test sits at the top level.
  TEST_STAGES = %w[recorder live model engine analysis formats integrations cli lab top gem].freeze

  def test_tests_live_in_their_stage_folders
    root = File.expand_path("../..", __dir__)
    tests = Dir[File.join(root, "test/**/*_test.rb")].map { |path| path.delete_prefix("#{root}/test/") }
    assert_operator tests.size, :>, 50
    misplaced = tests.reject { |path| TEST_STAGES.include?(path.split("/").first) && path.count("/") == 1 }
    assert_empty misplaced, "tests outside test/<stage>/"
    TEST_STAGES.each { |stage| refute_empty Dir[File.join(root, "test", stage, "*_test.rb")], stage }
  end

  # The gem ships what users run (the lab's scenarios and their helpers), not research scripts
  # (research/: docs/advise.md and docs/metrics.md read their tables) or the benchmarks.
  def test_the_gem_ships_no_research_or_benchmarks
    spec = Dir.chdir(ROOT) { Gem::Specification.load("gvlscope.gemspec") }
    assert_includes spec.files, "lab/thread_ring.rb"
    assert_empty spec.files.grep(%r{\A(research|bench)/|\Alab/(io_overlap|thread_sweep_model)}), spec.files.inspect
    Dir[File.join(ROOT, "research/*.rb")].each { |path| refute_includes spec.files, path.delete_prefix("#{ROOT}/") }
  end
end
