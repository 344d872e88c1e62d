# frozen_string_literal: true

$LOAD_PATH.unshift File.expand_path("../lib", __dir__)
require "gvlscope"
require "minitest/autorun"
require "open3"
require "rbconfig"

module GVLScopeTestHelper
  ROOT = File.expand_path("..", __dir__)

  # Runs Ruby code in a fresh interpreter (this one, with lib on the load path); returns
  # [stdout, stderr, status]. Scenarios that change process-wide state run this way.
  def run_ruby(code, *args, ruby: RbConfig.ruby, env: {})
    Open3.capture3(env, ruby, "-I", File.join(ROOT, "lib"), "-e", code, *args)
  end
end
