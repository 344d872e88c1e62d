# frozen_string_literal: true

require "fileutils"
require "open3"

# npm packages the tests run (speedscope's app, the statsd server), installed once by npm into the
# user's cache, outside the repository and shared by every checkout:
# ${XDG_CACHE_HOME:-~/.cache}/gvlscope/npm/NAME-VERSION. script/test installs npm itself.
module NpmPackage
  module_function

  def cache_dir(name, version)
    File.join(ENV.fetch("XDG_CACHE_HOME", File.join(Dir.home, ".cache")), "gvlscope", "npm", "#{name}-#{version}")
  end

  # The directory of the installed package (node_modules/NAME inside the cache entry), installing
  # it on first use. Skips the test when npm is missing; fails it when npm cannot install.
  def ensure_installed(test, name, version)
    dir = cache_dir(name, version)
    package = File.join(dir, "node_modules", name)
    return package if File.exist?(File.join(package, "package.json"))

    npm = ENV.fetch("PATH", "").split(File::PATH_SEPARATOR).map { |d| File.join(d, "npm") }.find { |p| File.executable?(p) }
    test.skip "npm is not installed, so #{name} cannot be: apt-get install npm (script/test installs it)" unless npm
    # Installed beside the final directory, then renamed: a checkout running the tests at the same
    # time never sees half a package.
    staging = "#{dir}.#{Process.pid}"
    out, status = Open3.capture2e(npm, "install", "--prefix", staging, "--no-audit", "--no-fund", "--ignore-scripts",
                                  "#{name}@#{version}")
    test.assert status.success?, "npm install #{name}@#{version} failed:\n#{out}"
    begin
      File.rename(staging, dir)
    rescue Errno::EEXIST, Errno::ENOTEMPTY
      FileUtils.rm_rf(staging) # another run installed it first
    end
    package
  end
end
