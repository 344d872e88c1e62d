# frozen_string_literal: true

require "test_helper"
require "net/http"
require "tmpdir"
require_relative "../support/puma_process"

# Every Puma family the docs name (6, 7.0 before Server#new_client, 7.2, 8), a real server each,
# real HTTP: a quick request beside a CPU-bound one, on a new connection and on a kept-alive one
# (which comes back through Puma's reactor thread). Each must carry the wait before the app
# (`queue`, and its GVL part in gvl-wait), inside what the client measured.
class PumaVersionsTest < Minitest::Test
  include PumaProcess
  include GVLScopeTestHelper

  APP = File.join(ROOT, "test/fixtures/web/app.ru")
  FAMILIES = { "6" => "gemfiles/puma6.gemfile", "7.0" => "gemfiles/puma7.0.gemfile",
               "7" => "gemfiles/puma7.gemfile", "8" => "Gemfile" }.freeze
  BOOT_TIMEOUT = 60

  def setup
    @dir = Dir.mktmpdir("gvlscope-puma-versions")
    @servers = []
  end

  def teardown
    @servers.each { |server| stop(server) }
    FileUtils.rm_rf(@dir)
  end

  FAMILIES.each do |family, gemfile|
    define_method(:"test_puma_#{family.tr('.', '_')}_counts_the_wait_before_the_app_on_new_and_kept_alive_connections") do
      server = start_puma(gemfile)
      version = server.log[/Puma version: ([\d.]+)/, 1]
      assert version&.start_with?("#{family}."), server.log
      refute_match(/only the wait inside the app/, server.log)
      Net::HTTP.start("127.0.0.1", server.port, open_timeout: 10, read_timeout: 30) do |kept|
        Array.new(2) { Thread.new { get(server.port, "/cpu?cpu_ms=20") } }.each(&:join) # both pool threads once
        alone = Array.new(5) do
          sent = clock
          kept.get("/fast") # the connection is kept: its next requests come through the reactor
          (clock - sent) * 1000
        end.sort[2]
        tries = { fresh: [], kept: [] }
        6.times do |i|
          kind = i.even? ? :kept : :fresh
          cpu = Thread.new { get(server.port, "/cpu?cpu_ms=300") }
          sleep 0.05
          sent = clock
          response = kind == :kept ? kept.get("/fast") : get(server.port, "/fast")
          tries[kind] << server_timing(response).merge("client" => (clock - sent) * 1000)
          cpu.join
        end
        report = "Puma #{version}, alone #{alone.round(1)} ms: #{tries.inspect}"
        tries.each_value.flat_map(&:itself).each do |try|
          # Inside what the client measured (within the clocks' error).
          assert_operator try["gvl-wait"], :<=, try["client"] * 1.01 + 0.5, report
          assert_operator try.fetch("queue", 0), :<=, try["client"] * 1.01 + 0.5, report
          assert_operator try.fetch("queue-gvl", 0), :<=, try.fetch("queue", 0) + 0.002, report
        end
        # 50 ms into a 300 ms burn on the other thread, a quick request waits for the GVL on its
        # way to the app (the thread that readied it, then the pool thread: up to a timeslice,
        # 100 ms, each): the wait before the app is seen, on a kept-alive connection too (the
        # reactor thread woke for it and waited). At least half the tries of each kind (a loaded
        # machine may start the burn late, or delay a request on its way to a core).
        tries.each do |kind, list|
          seen = list.count { |try| try.key?("queue") && try["queue-gvl"] >= 0.5 * (try["client"] - alone) }
          assert_operator seen, :>=, list.size / 2, "#{kind}: #{report}"
        end
      end
    end
  end

  def start_puma(gemfile)
    config_path = File.join(@dir, "puma-#{@servers.size}.rb")
    File.write(config_path, <<~RUBY)
      bind "tcp://127.0.0.1:0"
      threads 2, 2
      rackup #{APP.inspect}
      environment "test"
    RUBY
    log_path = File.join(@dir, "puma-#{@servers.size}.log")
    env = { "BUNDLE_GEMFILE" => File.join(ROOT, gemfile), "RUBYOPT" => nil }
    pid = Process.spawn(env, RbConfig.ruby, "-I", File.join(ROOT, "lib"), "-rbundler/setup", "-e",
                        'load Gem.bin_path("puma", "puma")', "--", "-C", config_path,
                        out: log_path, err: [:child, :out], pgroup: true)
    server = Server.new(pid, log_path)
    @servers << server
    deadline = clock + BOOT_TIMEOUT
    until (port = server.log[%r{Listening on http://127\.0\.0\.1:(\d+)}, 1])
      flunk "puma did not boot in #{BOOT_TIMEOUT} s:\n#{server.log}" if clock > deadline
      flunk "puma exited:\n#{server.log}" if Process.waitpid(pid, Process::WNOHANG)
      sleep 0.05
    end
    server.port = Integer(port)
    server
  end

  def get(port, path)
    Net::HTTP.start("127.0.0.1", port, open_timeout: 10, read_timeout: 30) { |http| http.get(path) }
  end

  def server_timing(response)
    response["server-timing"].split(", ").to_h { |entry| name, ms = entry.split(";dur="); [name, Float(ms)] }
  end
end
