# frozen_string_literal: true

require "test_helper"

class UnsupportedRubyTest < Minitest::Test
  include GVLScopeTestHelper

  def test_check_names_the_running_version_and_the_requirement
    error = assert_raises(GVLScope::UnsupportedRuby) { GVLScope.check_ruby!("ruby", "3.2.4") }
    assert_equal "gvlscope needs CRuby >= 3.3 (this is 3.2.4)", error.message
    assert_empty error.backtrace, "Ruby prints an uncaught one as its message alone, on one line"
    error = assert_raises(GVLScope::UnsupportedRuby) { GVLScope.check_ruby!("jruby", "3.4.0") }
    assert_equal "gvlscope needs CRuby >= 3.3 (this is jruby 3.4.0)", error.message
    assert_nil GVLScope.check_ruby!("ruby", "3.3.0")
    assert_nil GVLScope.check_ruby!("ruby", "3.10.0") # numbers, not strings
    # A CRuby newer than any gvlscope knows loads: it records without reading CRuby's structs
    # (test/gem/rubies_test.rb builds and runs that case).
    assert_nil GVLScope.check_ruby!("ruby", "5.0.0")
  end

  # Without our Bundler environment: the old Ruby must not load this Ruby's bundler/setup.
  CLEAN_ENV = %w[RUBYOPT RUBYLIB GEM_HOME GEM_PATH BUNDLE_GEMFILE BUNDLER_SETUP BUNDLE_BIN_PATH].to_h { |k| [k, nil] }.freeze

  # Every way into gvlscope, on Debian bookworm's own Ruby (3.1, the real old Ruby on our
  # machines), says the same one line on stderr; none gets as far as a LoadError (no Puma,
  # Sidekiq or Rails is installed for that Ruby: the check comes before them) or a suggestion to
  # rebuild.
  def test_every_entry_point_says_the_one_line_on_an_old_system_ruby
    old_ruby, version = old_system_ruby
    line = "gvlscope needs CRuby >= 3.3 (this is #{version})"
    {
      'require "gvlscope"' => "-e: #{line} (GVLScope::UnsupportedRuby)",
      'require "gvlscope/rack"' => "-e: #{line} (GVLScope::UnsupportedRuby)",
      'require "gvlscope/sidekiq"' => "-e: #{line} (GVLScope::UnsupportedRuby)",
      'require "puma/plugin/gvlscope"' => "-e: #{line} (GVLScope::UnsupportedRuby)", # what `plugin :gvlscope` loads
      # Bundler.require in a Rails app: the Railtie's way in.
      'module Rails; class Railtie; end; end; require "gvlscope"' => "-e: #{line} (GVLScope::UnsupportedRuby)",
    }.each do |code, said|
      _out, err, status = run_ruby(code, ruby: old_ruby, env: CLEAN_ENV)
      refute status.success?, code
      assert_equal [said], err.lines(chomp: true), code
    end

    # The command: the line alone, exit 1, whatever the subcommand.
    [%w[report test/fixtures/traces/hog.gvl], %w[run -- ruby -e 1], %w[top --once 1]].each do |args|
      out, err, status = Open3.capture3(CLEAN_ENV, old_ruby, File.join(ROOT, "exe/gvlscope"), *args, chdir: ROOT)
      assert_equal 1, status.exitstatus, args.join(" ")
      assert_equal [line], err.lines(chomp: true), args.join(" ")
      assert_empty out
    end

    # Autorun (RUBYOPT, what `gvlscope run` sets): the program runs as it would, told once why it is not traced.
    out, err, status = Open3.capture3(CLEAN_ENV.merge("RUBYOPT" => "-rgvlscope/autorun", "RUBYLIB" => File.join(ROOT, "lib")),
                                      old_ruby, "-e", "puts :ran; exit 3")
    assert_equal 3, status.exitstatus
    assert_equal "ran\n", out
    assert_match(/\Agvlscope: not tracing pid \d+: #{Regexp.escape(line)}\n\z/, err)
  end

  private

  # [path, RUBY_VERSION] of a Ruby older than 3.3 on this machine; skips without one.
  def old_system_ruby
    old_ruby = ["/usr/bin/ruby", "/usr/bin/ruby3.1"].find { |path| File.executable?(path) }
    skip "no Ruby < 3.3 at /usr/bin/ruby on this machine" unless old_ruby
    version, = Open3.capture2(CLEAN_ENV, old_ruby, "-e", "print RUBY_VERSION")
    skip "#{old_ruby} is #{version}, not older than 3.3" if Gem::Version.new(version) >= Gem::Version.new("3.3")
    [old_ruby, version]
  end
end
