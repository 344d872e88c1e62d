# frozen_string_literal: true

require_relative "test_helper"
require "gvlscope/live"
require "socket"
require "tmpdir"

# The live socket (GVLScope::LiveServer) in a real process, read by GVLScope::Live.fetch.
class LiveServerTest < Minitest::Test
  include GVLScopeTestHelper

  # A Ruby process that opens its live socket, prints its path, and then runs +body+ (default:
  # sleeps) until killed. Yields [pid, socket path, stdout].
  def with_target(body = "sleep", env: {}, open: "GVLScope::LiveServer.start")
    code = <<~RUBY
      require "gvlscope"
      server = #{open}
      $stdout.puts server.path
      $stdout.flush
      #{body}
    RUBY
    out, = IO.pipe
    reader, writer = IO.pipe
    pid = Process.spawn(env, RbConfig.ruby, "-I", File.join(ROOT, "lib"), "-e", code, out: writer)
    writer.close
    path = reader.gets&.chomp
    flunk "the target did not open its socket" unless path
    yield pid, path, reader
  ensure
    if pid
      begin
        Process.kill(:KILL, pid)
      rescue Errno::ESRCH
        nil
      end
      Process.wait(pid)
    end
    out&.close
    reader&.close
  end

  def test_fetch_by_pid_returns_the_targets_threads
    body = 'Thread.new { Thread.current.name = "spinner"; loop { 1000.times {} } }; sleep'
    with_target(body) do |pid, path|
      assert_equal File.join(GVLScope::Live::Paths.own_dir, "#{pid}.sock"), path
      first = GVLScope::Live.fetch(pid: pid)
      sleep 0.3
      second = GVLScope::Live.fetch(socket: path)
      assert_equal pid, first.pid
      assert_equal "socket", first.source
      interval = second - first
      spinner = interval.threads.find { |row| row.label == "spinner" }
      assert spinner, interval.threads.map(&:label).inspect
      # It ran nearly all the interval: the GVL is free but for the server's answer.
      assert_operator spinner.run_ns, :>, interval.interval_ns / 2
      assert_operator interval.held_ratio, :>, 0.5
      assert_equal first.to_h, GVLScope::Live::Snapshot.from_json(first.to_json).to_h
    end
  end

  def test_socket_is_owner_only
    with_target do |_pid, path|
      assert_equal 0o600, File.stat(path).mode & 0o777
      assert_equal 0o700, File.stat(File.dirname(path)).mode & 0o777
      assert_equal Process.euid, File.stat(path).uid
    end
  end
end
