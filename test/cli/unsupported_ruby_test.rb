# frozen_string_literal: true

require "test_helper"

class UnsupportedRubyTest < Minitest::Test
  include GVLScopeTestHelper

  def test_check_names_the_running_version_and_the_requirement
    error = assert_raises(GVLScope::UnsupportedRuby) { GVLScope.check_ruby!("ruby", "3.2.4") }
    assert_match(/needs CRuby >= 3\.3/, error.message)
    assert_match(/this is ruby 3\.2\.4/, error.message)
    assert_raises(GVLScope::UnsupportedRuby) { GVLScope.check_ruby!("jruby", "3.4.0") }
    assert_nil GVLScope.check_ruby!("ruby", "3.3.0")
    assert_nil GVLScope.check_ruby!("ruby", "3.10.0") # numbers, not strings
    # A CRuby newer than any gvlscope knows loads: it records without reading CRuby's structs
    # (test/gem/rubies_test.rb builds and runs that case).
    assert_nil GVLScope.check_ruby!("ruby", "5.0.0")
  end

  # Debian bookworm's own Ruby (3.1) is the real old Ruby on our machines.
  def test_require_on_an_old_system_ruby_fails_with_the_message
    old_ruby = ["/usr/bin/ruby", "/usr/bin/ruby3.1"].find { |path| File.executable?(path) }
    skip "no Ruby < 3.3 at /usr/bin/ruby on this machine" unless old_ruby
    # Without our Bundler environment: the old Ruby must not load this Ruby's bundler/setup.
    clean_env = %w[RUBYOPT RUBYLIB GEM_HOME GEM_PATH BUNDLE_GEMFILE BUNDLER_SETUP BUNDLE_BIN_PATH].to_h { |k| [k, nil] }
    version, = Open3.capture2(clean_env, old_ruby, "-e", "print RUBY_VERSION")
    skip "#{old_ruby} is #{version}, not older than 3.3" if Gem::Version.new(version) >= Gem::Version.new("3.3")

    _out, err, status = run_ruby('require "gvlscope"', ruby: old_ruby, env: clean_env)
    refute status.success?
    assert_match(/GVLScope::UnsupportedRuby/, err)
    assert_match(/needs CRuby >= 3\.3.*this is ruby #{Regexp.escape(version)}/, err)
    refute_match(/LoadError|Segmentation/, err)
  end
end
