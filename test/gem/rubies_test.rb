# frozen_string_literal: true

require "test_helper"
require "tmpdir"
require "fileutils"

# Readiness for Rubies these machines cannot run (docs/rubies.md): Ruby 4.0's Ractor API, a second
# copy of the extension in one process (Ruby::Box), CRuby struct layouts checked against CRuby's
# own headers, and a Ruby newer than every layout gvlscope knows.
class RubiesTest < Minitest::Test
  include GVLScopeTestHelper

  CHECK_HEADERS = File.join(ROOT, "script/check-ruby-headers")
  # The script finds the installed gem itself, outside this test's bundle.
  WITHOUT_BUNDLE = %w[RUBYOPT RUBYLIB BUNDLE_GEMFILE BUNDLER_SETUP BUNDLE_BIN_PATH].to_h { |key| [key, nil] }

  # 4.0 removed Ractor#take; 3.x has no Ractor#value.
  def test_ractor_result_takes_whichever_of_value_and_take_exists
    on_4_0 = Object.new.tap { |ractor| def ractor.value = :by_value }
    on_3_x = Object.new.tap { |ractor| def ractor.take = :by_take }
    assert_equal :by_value, RactorResult.of(on_4_0)
    assert_equal :by_take, RactorResult.of(on_3_x)
  end

  # With RUBY_BOX=1 every box loads its own copy of the library, as a second copy at another path
  # is loaded here: one hook and one thread-specific key (of CRuby's 8) per process, so it refuses.
  def test_a_second_copy_of_the_extension_refuses_to_load_and_the_first_keeps_working
    library = Dir[File.join(ROOT, "lib/gvlscope/gvlscope.{so,bundle}")].first
    skip "the extension is not compiled (bundle exec rake compile)" unless library
    Dir.mktmpdir("gvlscope-copy") do |dir|
      copy = File.join(dir, File.basename(library))
      FileUtils.cp(library, copy)
      out, err, status = run_ruby(<<~RUBY, copy, File.join(dir, "t.gvl"))
        require "gvlscope"
        begin
          require ARGV[0]
          puts "loaded twice"
        rescue GVLScope::Error => e
          puts e.message
        end
        GVLScope.trace(ARGV[1]) { 3.times.map { Thread.new { sleep 0.001 } }.each(&:join) }
        puts GVLScope::Model.timeline(ARGV[1]).threads.size
      RUBY
      assert status.success?, err
      message, threads = out.lines.map(&:chomp)
      assert_match(/gvlscope is loaded already in this process.*Ruby::Box.*loads once/, message)
      assert_operator threads.to_i, :>=, 4, "the first copy's hook recorded: #{out}"
    end
  end

  # The table in ext/gvlscope/cruby_layout.h against the headers of every CRuby in the
  # datadog-ruby_core_source gem (4.0.0, 4.0.6, 4.1.0-preview1 among them), when it is installed.
  def test_the_layouts_read_match_cruby_s_own_headers
    out, err, status = run_process([RbConfig.ruby, CHECK_HEADERS], env: WITHOUT_BUNDLE)
    skip "datadog-ruby_core_source is not installed: #{err.strip}" if status.exitstatus == 2
    assert status.success?, out + err
    %w[4.0.0 4.0.6].each do |version|
      line = out.lines.find { |l| l.start_with?("CRuby #{version}:") } or next
      assert_match(/rb_ractor_pub.id @8, 4 bytes; gvlscope reads .* as 4 bytes: OK/, line)
    end
    line = out.lines.find { |l| l.start_with?("CRuby 4.1.0") }
    assert_match(/rb_ractor_pub.id @8, 8 bytes; gvlscope reads .* as 8 bytes: OK/, line) if line
  end

  # Headers made up here: the check must notice a width that differs from the table, and must not
  # fail for a version the table leaves out (gvlscope reads nothing there).
  def test_the_header_check_fails_on_a_layout_that_differs_from_the_table
    Dir.mktmpdir("gvlscope-headers") do |dir|
      fake_headers(File.join(dir, "ruby-4.0.0-p0"), id_type: "uint32_t")
      fake_headers(File.join(dir, "ruby-4.1.0-preview1"), id_type: "uint32_t") # 4.1 made it rb_serial_t
      fake_headers(File.join(dir, "ruby-9.0.0-p0"), id_type: "rb_serial_t")
      out, err, status = run_process([RbConfig.ruby, CHECK_HEADERS, dir], env: WITHOUT_BUNDLE)
      assert_equal 1, status.exitstatus, out + err
      assert_match(/^CRuby 4\.0\.0: .*id @8, 4 bytes; gvlscope reads .* as 4 bytes: OK$/, out)
      assert_match(/^CRuby 4\.1\.0-preview1: .*id @8, 4 bytes; gvlscope reads .* as 8 bytes: MISMATCH$/, out)
      assert_match(/^CRuby 9\.0\.0: .*not in its table, reads no Ractor id/, out)
    end
  end

  # A Ruby newer than the table (built here as if it were 9.0): it loads and records, with every
  # thread in Ractor 0, and says so through Native::RACTOR_IDS.
  def test_a_ruby_newer_than_every_known_layout_records_with_one_ractor
    Dir.mktmpdir("gvlscope-future") do |dir|
      build = File.join(dir, "build")
      FileUtils.mkdir_p([build, File.join(dir, "lib/gvlscope")])
      env = { "GVLSCOPE_LAYOUT_FOR_API" => "900" }
      out, err, status = run_process([RbConfig.ruby, File.join(ROOT, "ext/gvlscope/extconf.rb")], env: env, chdir: build, timeout: 300)
      assert status.success?, out + err
      assert_match(/newer than the CRuby internals gvlscope has checked/, out)
      _out, err, status = run_process(["make", "-j2"], chdir: build, timeout: 600)
      assert status.success?, err
      FileUtils.cp(Dir[File.join(build, "**/gvlscope.{so,bundle}")].first, File.join(dir, "lib/gvlscope"))
      out, err, status = run_process([RbConfig.ruby, "-I", File.join(dir, "lib"), "-I", File.join(ROOT, "lib"), "-e", <<~RUBY, File.join(dir, "t.gvl")])
        require "gvlscope"
        require #{RACTOR_RESULT.inspect}
        Warning[:experimental] = false
        GVLScope.trace(ARGV[0]) { RactorResult.of(Ractor.new { 2.times.map { Thread.new { Thread.pass } }.each(&:join) }) }
        puts GVLScope::Native::RACTOR_IDS
        puts GVLScope::Model.timeline(ARGV[0]).ractors.keys.inspect
      RUBY
      assert status.success?, err
      assert_equal %w[false [0]], out.lines.map(&:chomp)
    end
  end

  def test_ractor_ids_are_read_on_this_ruby
    assert_equal true, GVLScope::Native::RACTOR_IDS, "#{RUBY_VERSION} is in ext/gvlscope/cruby_layout.h's table"
  end

  private

  # A CRuby header folder holding only what script/check-ruby-headers reads, with the Ractor id
  # declared as +id_type+.
  def fake_headers(folder, id_type:)
    FileUtils.mkdir_p([File.join(folder, "ccan/list"), File.join(folder, "internal")])
    File.write(File.join(folder, "ccan/list/list.h"), "struct ccan_list_node\n{\n\tstruct ccan_list_node *next, *prev;\n};\n")
    File.write(File.join(folder, "internal/serial.h"), "typedef unsigned LONG_LONG rb_serial_t;\n")
    File.write(File.join(folder, "ractor_core.h"), "struct rb_ractor_struct {\n    struct rb_ractor_pub pub;\n};\n")
    File.write(File.join(folder, "vm_core.h"), <<~C)
      typedef struct rb_thread_struct {
          struct ccan_list_node lt_node;
          VALUE self;
          rb_ractor_t *ractor;
          rb_vm_t *vm;
      } rb_thread_t;
      struct rb_ractor_pub {
          VALUE self;
          #{id_type} id;
          rb_hook_list_t hooks;
      };
    C
  end
end
