# frozen_string_literal: true

require "test_helper"
require "tmpdir"
require "fileutils"

# The gem as users get it: gem build, gem install into an empty GEM_HOME (compiling the
# extension from source), then require it from a plain Ruby.
class GemPackageTest < Minitest::Test
  include GVLScopeTestHelper

  # README.md's "Install" as written: its `gem build ... && gem install ./gvlscope-*.gem` line,
  # run by a shell in the checkout (the .gem it leaves there is removed), then the command it installed.
  def test_the_readme_install_line_installs_a_working_gvlscope
    readme = File.read(File.join(ROOT, "README.md"))
    line = readme[/^ {4}(gem build gvlscope\.gemspec && gem install .*)$/, 1]
    refute_nil line, "README.md shows no `gem build gvlscope.gemspec && gem install ...` line"
    Dir.mktmpdir("gvlscope-gem") do |dir|
      home = File.join(dir, "home")
      env = { "RUBYOPT" => nil, "BUNDLE_GEMFILE" => nil, "BUNDLER_SETUP" => nil, "GEM_HOME" => home, "GEM_PATH" => home,
              "PATH" => "#{File.join(home, 'bin')}:#{File.dirname(RbConfig.ruby)}:#{ENV.fetch('PATH')}" }
      built = File.join(ROOT, "gvlscope-#{GVLScope::VERSION}.gem")
      refute File.exist?(built), "#{built} is there already: this test would remove it"
      begin
        out, status = Open3.capture2e(env, "sh", "-c", "#{line} --local --no-document", chdir: ROOT)
        assert status.success?, "#{line}:\n#{out}"
      ensure
        FileUtils.rm_f(built)
      end
      out, err, status = Open3.capture3(env, "gvlscope", "report", File.join(ROOT, "test/fixtures/traces/hog.gvl"), chdir: dir)
      assert status.success?, err
      assert_match(/^Findings/, out)
    end
  end

  def test_built_gem_installs_into_a_fresh_gem_home_and_loads
    Dir.mktmpdir("gvlscope-gem") do |dir|
      env = { "RUBYOPT" => nil, "BUNDLE_GEMFILE" => nil, "BUNDLER_SETUP" => nil, "GEM_HOME" => File.join(dir, "home"),
              "GEM_PATH" => File.join(dir, "home") }
      gem = File.join(File.dirname(RbConfig.ruby), "gem")
      out, err, status = Open3.capture3(env, gem, "build", File.join(ROOT, "gvlscope.gemspec"), "--output",
                                        File.join(dir, "gvlscope.gem"), chdir: ROOT)
      assert status.success?, "gem build failed:\n#{out}#{err}"
      out, err, status = Open3.capture3(env, gem, "install", "--local", "--no-document", File.join(dir, "gvlscope.gem"))
      assert status.success?, "gem install failed:\n#{out}#{err}"
      out, err, status = Open3.capture3(env, RbConfig.ruby, "-rgvlscope", "-e",
                                        "p GVLScope::VERSION; p GVLScope::Probe.count { Thread.new { sleep 0.001 }.join }[:started]",
                                        chdir: dir)
      assert status.success?, err
      assert_equal "#{GVLScope::VERSION.inspect}\n1\n", out
      assert File.executable?(File.join(dir, "home", "bin", "gvlscope"))
      # The HTML report's template and viewer are packaged too.
      html = File.join(dir, "r.html")
      _out, err, status = Open3.capture3(env, RbConfig.ruby, File.join(dir, "home", "bin", "gvlscope"), "report", "--html",
                                         html, File.join(ROOT, "test/fixtures/traces/gvl-tracing-1.7.0.json"), chdir: dir)
      assert status.success?, err
      assert_match(/const REPORT = .*firstAfter/m, File.read(html))
      # The lab's programs are packaged: a scenario runs from the installed gem.
      out, err, status = Open3.capture3(env, RbConfig.ruby, File.join(dir, "home", "bin", "gvlscope"), "lab", "run", "race",
                                        "--size", "tiny", chdir: dir)
      assert status.success?, err
      assert_match(/\[holds\] With a Mutex the count is exact/, out)
    end
  end
end
