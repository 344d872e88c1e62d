# frozen_string_literal: true

require "test_helper"
require "tmpdir"
require "fileutils"

# A global `gvlscope run -- bundle exec puma` beside a bundled gvlscope: the process loads the
# global copy first (RUBYOPT's autorun), then the app requires the bundled one. One copy stays;
# the process is told once, and no constant is defined twice.
class OneCopyTest < Minitest::Test
  include GVLScopeTestHelper

  def test_a_second_copy_loads_the_first_copys_files
    Dir.mktmpdir("gvlscope-copies") do |dir|
      first, second = %w[global bundled].map do |name|
        FileUtils.mkdir_p(File.join(dir, name))
        FileUtils.cp_r(File.join(ROOT, "lib"), File.join(dir, name))
        File.join(dir, name, "lib")
      end
      code = <<~RUBY
        require #{File.join(first, 'gvlscope/autorun').inspect}
        require #{File.join(second, 'gvlscope').inspect}
        require #{File.join(second, 'gvlscope/rack').inspect}
        require #{File.join(second, 'puma/plugin/gvlscope').inspect}
        puts GVLScope::Rack.instance_method(:call).source_location.first
        puts GVLScope::PumaPlugin.method(:validate).source_location.first
      RUBY
      out, err, status = run_process([RbConfig.ruby, "-W", "-I", first, "-e", code],
                                     env: { "GVLSCOPE_OUTPUT" => File.join(dir, "t-%p.gvl") }, chdir: dir)
      assert status.success?, err
      refute_match(/already initialized constant|previous definition|method redefined/, err)
      assert_equal ["gvlscope: two copies of gvlscope in this process (#{first} and #{second}): keeping #{first}, loaded first"],
                   err.lines(chomp: true).grep(/two copies/)
      assert_equal 1, err.scan("two copies").size
      out.lines(chomp: true).each { |path| assert path.start_with?(first), path }
    end
  end
end
