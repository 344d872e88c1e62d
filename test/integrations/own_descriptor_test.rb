# frozen_string_literal: true

require_relative "../test_helper"
require "gvlscope/integrations/own_descriptor"
require "socket"
require "tmpdir"

# The descriptors gvlscope's servers keep in the program (live socket, /metrics, StatsD, the Puma
# plugin's channel) sit high and are checked before use: after the program closed one and got its
# number back for a file of its own, gvlscope neither uses nor closes it.
class OwnDescriptorTest < Minitest::Test
  include GVLScopeTestHelper

  def test_a_taken_descriptor_is_let_go_without_closing_it
    out, err, status = run_ruby(<<~'RUBY', Dir.tmpdir)
      require "gvlscope/integrations/own_descriptor"
      require "socket"
      server = GVLScope::OwnDescriptor.hide(TCPServer.new("127.0.0.1", 0))
      number = server.fileno
      puts number >= GVLScope::OwnDescriptor::FLOOR, server.class, GVLScope::OwnDescriptor.ours?(server)
      IO.for_fd(number, autoclose: true).close # a "close every descriptor" loop
      path = File.join(ARGV[0], "gvlscope-own-#{Process.pid}")
      file = File.open(path, "w")
      file.fcntl(Fcntl::F_DUPFD, number) # the program's file gets the number back
      puts GVLScope::OwnDescriptor.ours?(server)
      GVLScope::OwnDescriptor.close(server)
      GC.start
      puts File.readlink("/proc/self/fd/#{number}") == path # still open: the program's
      File.delete(path)
    RUBY
    assert status.success?, err
    assert_equal "true\nTCPServer\ntrue\nfalse\ntrue\n", out
  end
end
