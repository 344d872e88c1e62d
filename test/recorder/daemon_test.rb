# frozen_string_literal: true

require "test_helper"
require "tmpdir"

# Process.daemon forks through daemon(3), not Process._fork: the child inherited a running trace
# whose drain thread did not survive, and stopping it at exit joined that thread forever. The
# native side notices the fork itself (pthread_atfork) and drops what the child cannot finish;
# GVLScope's Process.daemon hook (fork.rb) then restarts there what follows a fork.
class DaemonTest < Minitest::Test
  include GVLScopeTestHelper

  DAEMON = <<~RUBY
    Process.daemon(true) # stdio to /dev/null: nobody waits for its output
    File.write(ARGV[0] + ".pid", Process.pid.to_s)
    Thread.new { sleep 0.01 }.join
  RUBY

  def test_a_daemon_under_gvlscope_run_exits
    Dir.mktmpdir("gvlscope-daemon") do |dir|
      File.write(File.join(dir, "daemon.rb"), DAEMON)
      _out, err, status = gvlscope("run", "--no-summary", "-o", "t-%p.gvl", "--", RbConfig.ruby, "daemon.rb",
                                   File.join(dir, "run"), chdir: dir)
      assert status.success?, err
      pid = assert_daemon_exits(File.join(dir, "run.pid"))
      # Said, once, where `gvlscope run` prints its words (issue 28: "0 events, no findings" and
      # nothing else); the daemon went on traced into its own file.
      assert_equal 1, err.scan(/calls Process\.daemon: its trace ends here; the daemon is traced into its own file/).size, err
      trace = GVLScope::Model::TraceFile.read(File.join(dir, "t-#{pid}.gvl"))
      refute trace.truncated?
      assert_operator trace.size, :>, 0
    end
  end

  # The recorder follows Process.daemon as it follows fork (issue 28: running? false in the
  # daemon, USR2 and dump_later did nothing).
  def test_a_flight_recorder_started_before_daemon_records_in_the_daemon
    Dir.mktmpdir("gvlscope-daemon") do |dir|
      _out, err, status = run_ruby(<<~RUBY, File.join(dir, "fr"), timeout: 30)
        require "gvlscope"
        GVLScope::FlightRecorder.start(dir: #{dir.inspect}, signal: nil, min_interval: 0)
        #{DAEMON}
        running = GVLScope::FlightRecorder.running?
        later = GVLScope::FlightRecorder.dump_later("in the daemon")&.value
        File.write(ARGV[0] + ".done", [running, later&.path].join(" "))
      RUBY
      assert status.success?, err
      pid = assert_daemon_exits(File.join(dir, "fr.pid"))
      running, path = File.read(File.join(dir, "fr.done")).split
      assert_equal "true", running, "the recorder runs in the daemon"
      assert_match(/gvlscope-flight-#{pid}-/, path)
      assert_operator GVLScope::Model::TraceFile.read(path).size, :>, 0
    end
  end

  def test_a_daemon_with_the_flight_recorder_exits_and_can_record_again
    Dir.mktmpdir("gvlscope-daemon") do |dir|
      out, err, status = run_ruby(<<~RUBY, File.join(dir, "fr"), timeout: 30)
        require "gvlscope"
        GVLScope::FlightRecorder.start(dir: #{dir.inspect}, signal: nil)
        #{DAEMON}
        # The recorder followed into the daemon; it stops and starts again as in any process.
        GVLScope::FlightRecorder.stop
        GVLScope::FlightRecorder.start(dir: #{dir.inspect}, signal: nil)
        dump = GVLScope::FlightRecorder.dump("after daemon")
        GVLScope::FlightRecorder.stop
        File.write(ARGV[0] + ".done", dump.events.to_s)
      RUBY
      assert status.success?, err + out
      assert_daemon_exits(File.join(dir, "fr.pid"))
      assert_path_exists File.join(dir, "fr.done")
    end
  end

  private

  # The daemon is no child of ours: poll its pid. 20 s (on an idle machine: hang_limit) is far
  # beyond its few ms of work.
  def assert_daemon_exits(pid_file)
    limit = GVLScopeTestHelper.hang_limit(20)
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + limit
    # File.write creates the file before it writes the pid: wait until it holds something.
    sleep 0.05 until File.size?(pid_file) || Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
    assert_path_exists pid_file, "the daemon started"
    pid = Integer(File.read(pid_file))
    alive = true
    while alive && Process.clock_gettime(Process::CLOCK_MONOTONIC) < deadline
      alive = begin
        Process.kill(0, pid)
        !File.read("/proc/#{pid}/stat").split[2].eql?("Z")
      rescue Errno::ESRCH, Errno::ENOENT
        false
      end
      sleep 0.05 if alive
    end
    Process.kill(:KILL, pid) if alive
    refute alive, "the daemon (pid #{pid}) was still running after #{limit} s: stop waited for a thread the fork left behind"
    pid
  end
end
