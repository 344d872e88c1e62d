# frozen_string_literal: true

require_relative "../test_helper"
require "gvlscope/live"
require "socket"
require "tmpdir"
require "etc"
require "json"

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

  # A process counting its requests per route (GVLScope::Rack) serves those numbers on the socket:
  # `gvlscope advise --pid` then advises per request and per route.
  def test_the_socket_serves_per_route_numbers
    body = <<~RUBY
      app = GVLScope::Rack.new(->(env) { sleep 0.001 if env["PATH_INFO"] == "/io"; [200, {}, ["ok"]] }, route: true)
      env = ->(path) { { "REQUEST_METHOD" => "GET", "PATH_INFO" => path, "SCRIPT_NAME" => "", "rack.input" => StringIO.new } }
      3.times { app.call(env.("/io")) }
      2.times { app.call(env.("/cpu")) }
      $stdout.puts "served"; $stdout.flush
      sleep
    RUBY
    with_target("require 'stringio'; #{body}") do |pid, _path, out|
      assert_equal "served", out.gets&.chomp
      snapshot = GVLScope::Live.fetch(pid: pid)
      routes = snapshot.breakdown.to_h { |entry| [entry[:label], entry] }
      assert_equal({ "GET /io" => 3, "GET /cpu" => 2 }, routes.transform_values { |entry| entry[:count] })
      assert_operator routes["GET /io"][:idle_ns], :>=, 3 * 1_000_000, "3 sleeps of 1 ms are idle"
    end
  end

  def test_socket_is_owner_only
    with_target do |_pid, path|
      assert_equal 0o600, File.stat(path).mode & 0o777
      assert_equal 0o700, File.stat(File.dirname(path)).mode & 0o777
      assert_equal Process.euid, File.stat(path).uid
    end
  end

  # A raw connection: what a client that is not ours sends.
  def raw(path)
    socket = UNIXSocket.new(path)
    yield socket
  ensure
    socket&.close
  end

  def read_all(socket, seconds = 10)
    text = +""
    while socket.wait_readable(seconds) && (chunk = socket.read_nonblock(4096, exception: false))
      break if chunk == :wait_readable

      text << chunk
    end
    text
  end

  def test_garbage_gets_an_error_line_and_the_connection_closed_and_serving_goes_on
    with_target do |pid, path|
      ["hello\n", "[1,2]\n", %({"get":"everything"}\n), "\xff\xfe\n".b].each do |garbage|
        raw(path) do |socket|
          socket.write(garbage)
          answer = read_all(socket) # to EOF: the server closed it
          assert_equal 1, answer.lines.size, garbage.inspect
          assert_match(/not a request/, JSON.parse(answer)["error"])
        end
      end
      raw(path) do |socket|
        socket.write("x" * (GVLScope::LiveServer::MAX_REQUEST_BYTES + 100))
        assert_match(/request longer than 4096 bytes/, JSON.parse(read_all(socket))["error"])
      end
      assert_equal pid, GVLScope::Live.fetch(pid: pid).pid
    end
  end

  def test_a_request_left_unfinished_times_out
    with_target do |pid, path|
      raw(path) do |socket|
        socket.write('{"get":')
        started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
        answer = read_all(socket, 10)
        waited = Process.clock_gettime(Process::CLOCK_MONOTONIC) - started
        assert_match(/not finished within 2\.0 s/, JSON.parse(answer)["error"])
        assert_operator waited, :>=, GVLScope::LiveServer::REQUEST_TIMEOUT - 0.1
        # Meanwhile (and after) others are served: the stalled client blocks nobody.
        assert_equal pid, GVLScope::Live.fetch(pid: pid).pid
      end
    end
  end

  def test_one_connection_serves_many_requests
    with_target do |pid, path|
      client = GVLScope::Live::Client.new(path, pid: pid)
      snapshots = Array.new(5) { client.snapshot }
      assert_equal 5, snapshots.map(&:time_ns).uniq.size
      assert_equal({ "pid" => pid, "version" => GVLScope::VERSION, "protocol" => 1 }, client.hello)
      client.close
    end
  end

  def test_the_socket_is_removed_at_exit
    with_target("sleep 0.2") do |pid, path|
      Process.wait(pid)
      refute File.exist?(path), "#{path} is left behind"
      pid = nil
    end
  rescue Errno::ECHILD
    nil
  end

  def nobody
    Etc.getpwnam("nobody")
  rescue ArgumentError
    nil
  end

  # Runs the block in a forked child as the user nobody; returns what it returned (a String).
  def as_nobody
    reader, writer = IO.pipe
    child = fork do
      reader.close
      Process::GID.change_privilege(nobody.gid)
      Process::UID.change_privilege(nobody.uid)
      writer.write(yield.to_s)
      writer.close
      exit!(0)
    end
    writer.close
    answer = reader.read
    Process.wait(child)
    answer
  end

  def test_another_user_cannot_connect_owner_only_permissions
    skip "needs root to act as another user" unless Process.euid.zero? && nobody

    with_target do |pid, path|
      answer = as_nobody do
        GVLScope::Live.fetch(socket: path)
      rescue GVLScope::Error => e
        e.message
      end
      assert_match(/permission denied on #{Regexp.escape(path)}: it belongs to another user/, answer)
      by_pid = as_nobody do
        GVLScope::Live.fetch(pid: pid)
      rescue GVLScope::Error => e
        e.message
      end
      assert_equal "pid #{pid} runs as root (uid 0); its live socket answers only that user: run gvlscope top as root", by_pid
    end
  end

  # Even when the permissions are opened by mistake, the server checks who connects (SO_PEERCRED).
  def test_another_user_is_refused_by_uid_when_the_permissions_let_them_in
    skip "needs root to act as another user" unless Process.euid.zero? && nobody

    Dir.mktmpdir("gvlscope-live-open") do |dir|
      File.chmod(0o755, dir)
      open = "GVLScope::LiveServer.start(dir: #{dir.inspect}).tap { |s| File.chmod(0o777, s.path) }"
      with_target(open: open) do |_pid, path|
        # A bare connection (gvlscope's client refuses a server of another uid): the refusal comes unasked.
        answer = as_nobody { UNIXSocket.open(path) { |socket| JSON.parse(socket.gets)["error"] } }
        assert_equal "this socket answers only uid 0 (root); you are uid #{nobody.uid}", answer
        # Root, the owner, still gets its answer.
        refute_nil GVLScope::Live.fetch(socket: path)
      end
    end
  end

  # A socket served by nobody in +dir+ (which nobody can write in), answering every line with a
  # made-up hello; yields the socket's path.
  def with_squatter(path)
    ready_reader, ready_writer = IO.pipe
    squatter = fork do
      ready_reader.close
      Process::GID.change_privilege(nobody.gid)
      Process::UID.change_privilege(nobody.uid)
      server = UNIXServer.new(path)
      File.chmod(0o777, path)
      ready_writer.puts "ready"
      ready_writer.close
      loop do
        client = server.accept
        client.puts JSON.generate({ "pid" => 1, "version" => "fake", "protocol" => 1 }) while client.gets
        client.close
      end
    end
    ready_writer.close
    assert_equal "ready\n", ready_reader.gets, "the squatter did not listen"
    yield path
  ensure
    ready_reader&.close
    if squatter
      Process.kill(:KILL, squatter)
      Process.wait(squatter)
    end
  end

  # Another user makes our socket directory first (no XDG_RUNTIME_DIR: /tmp/gvlscope-<uid>) and
  # serves a socket of their own in it: our server says why it does not serve, our client refuses.
  def test_a_socket_directory_squatted_by_another_user_is_neither_served_nor_read
    skip "needs root to act as another user" unless Process.euid.zero? && nobody

    Dir.mktmpdir("gvlscope-runtime") do |runtime|
      File.chmod(0o1777, runtime) # open to the squatter, as /tmp is
      squatted = File.join(runtime, "gvlscope")
      as_nobody { Dir.mkdir(squatted, 0o755) }
      env = { "XDG_RUNTIME_DIR" => runtime, "GVLSCOPE_LIVE" => "1", "GVLSCOPE_TRACE" => "0" }
      err_reader, err_writer = IO.pipe
      pid = Process.spawn(env, RbConfig.ruby, "-I", File.join(ROOT, "lib"), "-rgvlscope/autorun", "-e", "sleep",
                          err: err_writer)
      err_writer.close
      assert_equal "gvlscope: no live socket for pid #{pid}: gvlscope live: #{squatted} belongs to uid #{nobody.uid}, " \
                   "not to us (uid 0)\n", err_reader.gets
      with_squatter(File.join(squatted, "#{pid}.sock")) do |path|
        error = assert_raises(GVLScope::Error) { GVLScope::Live.fetch(pid: pid) }
        assert_equal "pid #{pid}: not reading #{path}: #{squatted} belongs to uid #{nobody.uid}, not to us (uid 0) " \
                     "(another user may be serving it)", error.message
      end
    ensure
      if pid
        Process.kill(:KILL, pid)
        Process.wait(pid)
      end
      err_reader&.close
    end
  end

  # The client asks the socket who serves it (SO_PEERCRED): another user's server is refused
  # wherever its socket is, and a socket of ours answers for its own process only.
  def test_the_client_reads_only_the_process_it_asked_for_as_our_own_user
    skip "needs root to act as another user" unless Process.euid.zero? && nobody

    Dir.mktmpdir("gvlscope-theirs") do |dir|
      File.chown(nobody.uid, nobody.gid, dir)
      with_squatter(File.join(dir, "fake.sock")) do |path|
        error = assert_raises(GVLScope::Error) { GVLScope::Live::Client.new(path).hello }
        assert_equal "#{path}: not reading #{path}: it is served by uid #{nobody.uid}, not by us (uid 0)", error.message
      end
    end
    with_target do |first, _first_path|
      with_target do |second, second_path|
        assert_equal second, GVLScope::Live::Client.new(second_path, pid: second).hello["pid"]
        error = assert_raises(GVLScope::Error) { GVLScope::Live::Client.new(second_path, pid: first).hello }
        assert_equal "pid #{first}: not reading #{second_path}: it is served by pid #{second}, not by pid #{first}",
                     error.message
      end
    end
  end

  def test_a_forked_child_gets_no_socket_unless_asked_and_leaves_the_parents
    body = <<~'RUBY'
      quiet = fork { sleep 0.5 }
      asked = fork { GVLScope::LiveServer.start; $stdout.puts "asked #{GVLScope::LiveServer.current.path}"; $stdout.flush; sleep 0.5 }
      $stdout.puts "quiet #{quiet}"
      $stdout.flush
      Process.wait(quiet)
      Process.wait(asked)
      $stdout.puts "done"
      $stdout.flush
      sleep
    RUBY
    with_target(body) do |pid, path, out|
      lines = 3.times.map { out.gets.to_s.chomp }
      quiet = lines.find { |l| l.start_with?("quiet ") }.split.last.to_i
      asked_path = lines.find { |l| l.start_with?("asked ") }.split.last
      assert_equal "done", lines.last
      refute File.exist?(File.join(File.dirname(path), "#{quiet}.sock")), "an unasked child opened a socket"
      refute_equal path, asked_path
      refute File.exist?(asked_path), "the asked child's socket is removed at its exit"
      assert File.socket?(path), "a child's exit removed the parent's socket"
      assert_equal pid, GVLScope::Live.fetch(pid: pid).pid
    end
  end

  def test_a_daemon_opens_its_own_socket_and_removes_the_parents
    body = <<~'RUBY'
      w = IO.new(3)
      Process.daemon(true, true)
      w.puts "#{Process.pid} #{GVLScope::LiveServer.current&.path}"
      w.close
      sleep 30
    RUBY
    reader, writer = IO.pipe
    code = "require 'gvlscope'; parent = GVLScope::LiveServer.start.path; warn parent; #{body}"
    pid = Process.spawn(RbConfig.ruby, "-I", File.join(ROOT, "lib"), "-e", code, 3 => writer, err: writer.dup.tap { |e| @e = e })
    writer.close
    @e.close
    parent_path = reader.gets.to_s.chomp
    daemon_pid, daemon_path = reader.gets.to_s.split
    Process.wait(pid)
    daemon_pid = daemon_pid.to_i
    refute_equal pid, daemon_pid
    assert_equal File.join(File.dirname(parent_path), "#{daemon_pid}.sock"), daemon_path
    refute File.exist?(parent_path), "the parent's socket outlived it"
    assert_equal daemon_pid, GVLScope::Live.fetch(pid: daemon_pid).pid
  ensure
    Process.kill(:KILL, daemon_pid) if daemon_pid&.positive?
  end

  # exec replaces the image without at_exit: the socket file stayed behind at a path nobody
  # served (the new image has the same pid). It goes just before the exec; an exec that fails
  # (ENOENT) leaves the program going on, its socket served again at the same path. What the
  # program prints and its exit status are its own.
  def test_exec_removes_the_socket_and_a_failed_exec_keeps_serving
    Dir.mktmpdir("gvlscope-exec-live") do |runtime|
      File.chmod(0o700, runtime)
      program = <<~'RUBY'
        require "gvlscope/live"
        path = GVLScope::LiveServer.current.path
        puts "before: #{File.socket?(path)}"
        begin
          exec(File.join(ARGV[0], "no-such-program"))
        rescue Errno::ENOENT
          puts "ENOENT"
        end
        puts "after a failed exec: #{File.socket?(path)}, serves #{GVLScope::Live.fetch(pid: Process.pid).pid == Process.pid}"
        $stdout.flush
        exec({ "RUBYOPT" => nil }, RbConfig.ruby, "-e", <<~'NEW', path)
          sockets = Dir.children("/proc/self/fd").count { |fd| File.readlink("/proc/self/fd/#{fd}").start_with?("socket:") rescue false }
          puts "new image: #{File.exist?(ARGV[0]) ? 'socket left' : 'socket gone'}, #{sockets} sockets inherited"
          exit 7
        NEW
      RUBY
      env = { "RUBYOPT" => "-I#{File.join(ROOT, 'lib')} -rgvlscope/autorun", "GVLSCOPE_LIVE" => "1",
              "GVLSCOPE_OUTPUT" => File.join(runtime, "t-%p.gvl"), "XDG_RUNTIME_DIR" => runtime }
      out, err, status = run_process([RbConfig.ruby, "-e", program, runtime], env: env)
      assert_equal [7, ""], [status.exitstatus, err]
      assert_equal "before: true\nENOENT\nafter a failed exec: true, serves true\nnew image: socket gone, 0 sockets inherited\n", out
      assert_empty Dir.children(File.join(runtime, "gvlscope")), "no socket left after the new image exited"
    end
  end

  def test_opened_only_when_asked_under_autorun
    code = 'puts Process.pid; $stdout.flush; sleep 1; puts Dir[File.join(ARGV[0], "*.sock")].join(" ")'
    dir = GVLScope::Live::Paths.own_dir
    env = { "RUBYOPT" => "-I#{File.join(ROOT, 'lib')} -rgvlscope/autorun", "GVLSCOPE_TRACE" => "0" }
    out, err, status = run_process([RbConfig.ruby, "-e", code, dir], env: env)
    assert status.success?, err
    pid, sockets = out.lines.map(&:chomp)
    refute_includes sockets.to_s.split, File.join(dir, "#{pid}.sock")

    out, err, status = run_process([RbConfig.ruby, "-e", code, dir], env: env.merge("GVLSCOPE_LIVE" => "1"))
    assert status.success?, err
    pid, sockets = out.lines.map(&:chomp)
    assert_includes sockets.to_s.split, File.join(dir, "#{pid}.sock")
    assert_empty err
    refute File.exist?(File.join(dir, "#{pid}.sock"))
  end

  def test_gvlscope_run_live_tells_the_pid_to_watch
    Dir.mktmpdir("gvlscope-run-live") do |dir|
      _out, err, status = gvlscope("run", "--live", "--no-summary", "-o", File.join(dir, "t.gvl"), "--", RbConfig.ruby,
                                   "-e", "sleep 1", chdir: dir)
      assert status.success?, err
      assert_match(/\Agvlscope: pid (\d+) is live: gvlscope top \1\n\z/, err)
    end
  end

  def test_the_socket_goes_under_xdg_runtime_dir_and_a_client_without_it_finds_it
    Dir.mktmpdir("gvlscope-xdg") do |runtime|
      File.chmod(0o700, runtime)
      with_target(env: { "XDG_RUNTIME_DIR" => runtime }) do |pid, path|
        assert_equal File.join(runtime, "gvlscope", "#{pid}.sock"), path
        assert_equal 0o700, File.stat(File.join(runtime, "gvlscope")).mode & 0o777
        # This process's environment has another runtime dir (or none): /proc/PID/environ tells.
        assert_equal pid, GVLScope::Live::Client.for_pid(pid).snapshot.pid
      end
    end
  end

  def test_a_socket_directory_that_is_not_ours_or_open_to_others_is_refused
    skip "needs root to give a directory away" unless Process.euid.zero? && nobody

    Dir.mktmpdir("gvlscope-runtime") do |runtime|
      dir = File.join(runtime, "gvlscope")
      Dir.mkdir(dir)
      File.chown(nobody.uid, nobody.gid, dir)
      error = assert_raises(GVLScope::Error) { GVLScope::Live::Paths.own_dir(env: { "XDG_RUNTIME_DIR" => runtime }) }
      assert_equal "gvlscope live: #{dir} belongs to uid #{nobody.uid}, not to us (uid 0)", error.message
      File.chown(0, 0, dir)
      File.chmod(0o777, dir)
      error = assert_raises(GVLScope::Error) { GVLScope::Live::Paths.own_dir(env: { "XDG_RUNTIME_DIR" => runtime }) }
      assert_equal "gvlscope live: #{dir} is writable by others (mode 777)", error.message
      File.chmod(0o755, dir)
      assert_equal dir, GVLScope::Live::Paths.own_dir(env: { "XDG_RUNTIME_DIR" => runtime })
      assert_equal 0o700, File.stat(dir).mode & 0o777, "a directory of ours is made private"
    end
  end

  def test_sockets_of_dead_processes_are_cleaned_up
    dead = Process.spawn("true")
    Process.wait(dead)
    stale = File.join(GVLScope::Live::Paths.own_dir, "#{dead}.sock")
    UNIXServer.new(stale).close
    assert File.socket?(stale)
    with_target do |_pid, _path|
      refute File.exist?(stale), "a dead process's socket is left"
    end
  ensure
    File.unlink(stale) if stale && File.exist?(stale)
  end

  # A live socket served by this process (its own directory), for clients that misbehave.
  def with_own_server
    Dir.mktmpdir do |dir|
      server = GVLScope::LiveServer.new(dir: dir).start
      yield server
    ensure
      server&.stop
    end
  end

  def clock = Process.clock_gettime(Process::CLOCK_MONOTONIC)

  # The server's state of its connections (its thread changes them; a String's size reads whole).
  def connections(server) = server.instance_variable_get(:@clients)&.values || []

  # A client that pipelines requests and never reads used to have every line answered at once,
  # its output kept without bound (18 -> 313 MB in 20 s). Now one answer waits for it and the
  # rest of what it sent is not read: its writes block.
  def test_a_client_that_sends_and_never_reads_has_one_answer_buffered
    with_own_server do |server|
      socket = UNIXSocket.new(server.path)
      requests = %({"get":"snapshot"}\n) * 1000
      sent = 0
      stop_at = clock + 5
      until clock > stop_at
        written = socket.write_nonblock(requests, exception: false)
        next sent += written unless written == :wait_writable
        break unless socket.wait_writable(1) # the server stopped reading
      end
      answer = JSON.generate({ "snapshot" => server.snapshot.to_h }).bytesize + 1
      connection = connections(server).first
      assert connection, "the client is still connected"
      assert_operator connection.output.bytesize, :<=, 2 * answer, "the output waiting for the client: one answer at most"
      assert_operator connection.input.bytesize, :<=, 2 * GVLScope::LiveServer::MAX_REQUEST_BYTES
      # Once the client reads, the lines that waited are answered in turn.
      3.times { assert JSON.parse(socket.gets).key?("snapshot") }
      assert_operator sent, :>, 0
    ensure
      socket&.close
    end
  end

  # The deadline of a request runs from its first byte: a byte every 0.3 s used to move it each
  # time, for as long as the client went on.
  def test_a_trickling_request_times_out_from_its_first_byte
    with_own_server do |server|
      socket = UNIXSocket.new(server.path)
      socket.write('{"get":')
      started = clock
      trickle = Thread.new do
        100.times do
          socket.write(" ")
          sleep 0.3
        end
      rescue SystemCallError, IOError
        nil
      end
      answer = read_all(socket, 60)
      assert_match(/not finished within 2\.0 s/, JSON.parse(answer)["error"])
      assert trickle.alive?, "refused only once the client stopped trickling (#{(clock - started).round(1)} s)"
    ensure
      trickle&.kill
      socket&.close
    end
  end

  # Idle or trickling clients used to keep every slot, and a new client got "too many clients".
  # Now the one longest without an answer makes room, told why.
  def test_idle_and_trickling_clients_do_not_keep_a_new_client_out
    with_own_server do |server|
      max = GVLScope::LiveServer::MAX_CLIENTS
      idle = Array.new(max) { |i| UNIXSocket.new(server.path).tap { |s| s.write('{"get":') if i.odd? } }
      waited_until = clock + 30
      sleep 0.1 until connections(server).size == max || clock > waited_until
      client = UNIXSocket.new(server.path)
      client.write(%({"get":"hello"}\n))
      assert_equal Process.pid, JSON.parse(client.gets)["pid"]
      assert_match(/closed for a newer client/, JSON.parse(read_all(idle.first))["error"])
      assert_equal max, connections(server).size
    ensure
      [*idle, client].compact.each(&:close)
    end
  end

  # A process that kept opening connections used to close `top`'s (the one longest without an
  # answer, though top asked every second): top failed with "closed for a newer client". Now the
  # process holding the most connections loses its own, each told why, and top goes on.
  def test_a_client_that_keeps_opening_connections_does_not_close_a_tops
    with_own_server do |server|
      top = GVLScope::Live::Client.new(server.path)
      2.times { top.hello } # a top asks again every interval
      flood = <<~RUBY
        require "socket"
        opened = Array.new(#{3 * GVLScope::LiveServer::MAX_CLIENTS}) do
          UNIXSocket.new(ARGV[0]).tap { |socket| socket.write(%({"get":"hello"}\n)); socket.gets }
        end
        puts opened.first.gets
      RUBY
      out, err, status = Open3.capture3(RbConfig.ruby, "-e", flood, server.path)
      assert status.success?, err
      assert_equal Process.pid, top.hello["pid"]
      assert_match(/closed for a newer client: 8 connections at most and pid \d+ has 8 open/, JSON.parse(out)["error"])
    ensure
      top&.close
    end
  end

  # Clients that all come back keep their connections: a newcomer is the one refused, in one line.
  def test_a_newcomer_is_refused_when_every_connection_is_a_returning_client
    with_own_server do |server|
      clients = Array.new(GVLScope::LiveServer::MAX_CLIENTS) { GVLScope::Live::Client.new(server.path) }
      clients.each { |client| 2.times { client.hello } }
      error = assert_raises(GVLScope::Error) { GVLScope::Live::Client.new(server.path).hello }
      assert_match(/: busy: 8 connections at most and pid #{Process.pid} has 9 open; close one and try again\z/, error.message)
      clients.each { |client| assert_equal Process.pid, client.hello["pid"] }
    ensure
      clients&.each(&:close)
    end
  end

  # A snapshot of 5,000 threads is ~0.1 s of Ruby in the answering thread: at the default
  # priority it kept the GVL a whole 100 ms timeslice and more from the program's threads (the
  # host woke 226-471 ms late, bench/live.rb). At the lowest it gives the GVL up after 20 ms.
  def test_the_answering_thread_gives_the_gvl_up_first
    with_own_server do |server|
      assert_equal Process.pid, GVLScope::Live::Client.new(server.path).hello["pid"] # it serves: its priority is set
      assert_equal(-3, server.instance_variable_get(:@thread).priority)
      assert_equal 0, Thread.new { Thread.current.priority }.value, "the program's threads keep their own"
    end
  end

  # One EMFILE used to end the serving thread: no live socket for the rest of the process. Here
  # the process runs out of descriptors (RLIMIT_NOFILE lowered) while a client connects; once
  # some are free again the client is answered.
  def test_running_out_of_descriptors_pauses_accepting_and_serving_goes_on
    body = <<~RUBY
      FAILED = Queue.new
      UNIXServer.prepend(Module.new do
        def accept_nonblock(...)
          super
        rescue Errno::EMFILE
          FAILED << true
          raise
        end
      end)
      Process.setrlimit(:NOFILE, 64)
      files = []
      begin
        loop { files << File.open(File::NULL) }
      rescue Errno::EMFILE
        $stdout.puts "full"
        $stdout.flush
      end
      FAILED.pop
      files.each(&:close)
      sleep
    RUBY
    with_target(body) do |pid, path, out|
      assert_equal "full\n", out.gets
      raw(path) do |socket|
        socket.write(%({"get":"hello"}\n))
        assert socket.wait_readable(30), "no answer once descriptors were free again"
        assert_equal pid, JSON.parse(socket.gets)["pid"]
      end
    end
  end
end
