# frozen_string_literal: true

require "test_helper"

class CLITest < Minitest::Test
  include GVLScopeTestHelper

  def test_version
    out, _err, status = gvlscope("--version")
    assert status.success?
    assert_equal "gvlscope #{GVLScope::VERSION}\n", out
  end

  def test_help
    out, _err, status = gvlscope("--help")
    assert status.success?
    assert_match(/\AUsage: gvlscope COMMAND/, out)
  end

  def test_unknown_command_fails_with_usage
    _out, err, status = gvlscope("frobnicate")
    assert_equal 2, status.exitstatus
    assert_match(/unknown command 'frobnicate'/, err)
  end
end
