# frozen_string_literal: true

# Instructions per request, counted by valgrind (callgrind): what each web setup adds to a Puma
# request, in a number no neighbour on the machine can move (bench/web.rb measures requests/s,
# which on a shared 2-core VM swings by ±10 % from one run to the next, more than the 2 % it is
# asked to resolve). One Puma (5 threads, single mode) runs under callgrind serving
# test/fixtures/web/app.ru in its switchable mode (GVLSCOPE_TOGGLE); for each setup: switch, warm
# up, zero the counters, REQUESTS keep-alive requests from one client, dump the counters; ROUNDS
# rounds of all setups, the minimum per setup (the GC's work comes in bursts: a window that held a
# major GC counts more; switching runs a full GC first, so each window starts from a clean heap).
# Instructions are not time (cache misses, the kernel's share and the client are not in them),
# but a setup that adds 2 % of the instructions of a request adds about that much work.
#
#   bundle exec ruby -Ilib bench/web_instructions.rb        (REQUESTS=2000 ROUNDS=3; needs valgrind)
#   SETUPS=plain,metrics,recorder,no_server_timing,static_header,hook,middleware_only,recorder_no_server_timing
#   SETUPS=plain,header_10,header_70,header_280   the app adds a server-timing header of N characters
#   APP=rails (SETUPS=plain,no_server_timing,metrics,all): the realistic request instead, a Rails
#   action rendering a template from in-memory records (bench/rails_app/config.ru), GET /records
require "net/http"
require "rbconfig"
require "tmpdir"
require "timeout"
require_relative "puma_config"
require_relative "support/callgrind"

ROOT = File.expand_path("..", __dir__)
REQUESTS = Integer(ENV.fetch("REQUESTS", 2000))
WARMUP = Integer(ENV.fetch("WARMUP", 200)) # requests before each window
# GC=off: no GC in the measured windows (a full GC before each): the counts then do not depend on
# whether a window held a major GC, and the objects allocated per request tell the GC's share.
GC_OFF = ENV["GC"] == "off"
ROUNDS = Integer(ENV.fetch("ROUNDS", 3))
RAILS = ENV["APP"] == "rails"
SETUPS = ENV.fetch("SETUPS", RAILS ? "plain,no_server_timing,metrics,all" : "plain,metrics,recorder,no_server_timing,static_header").split(",")
RACKUP = File.join(ROOT, RAILS ? "bench/rails_app/config.ru" : "test/fixtures/web/app.ru")
REQUEST_PATH = RAILS ? "/records" : "/"

Callgrind.require!

results = Hash.new { |h, k| h[k] = [] }
allocations = Hash.new { |h, k| h[k] = [] }
Dir.mktmpdir("gvlscope-web-instructions") do |dir|
  config = write_puma_config(File.join(dir, "puma.rb"), rackup: RACKUP)
  log = File.join(dir, "puma.log")
  env = { "GVLSCOPE_MIDDLEWARE" => "0", "GVLSCOPE_TOGGLE" => "1", "GVLSCOPE_FLIGHT_DIR" => File.join(dir, "dumps") }
  puma = Callgrind.session(env, RbConfig.ruby, "-I", File.join(ROOT, "lib"), Gem.bin_path("puma", "puma"), "-C", config,
                           dir: dir, log: log)
  begin
    Timeout.timeout(RAILS ? 1200 : 300) { sleep 0.5 until File.read(log).match?(/Listening on/) }
    port = Integer(File.read(log)[%r{Listening on http://127\.0\.0\.1:(\d+)}, 1])
    Net::HTTP.start("127.0.0.1", port, read_timeout: 120) do |http|
      (SETUPS * ROUNDS).each do |setup|
        http.get("/__gvlscope/#{setup}").is_a?(Net::HTTPOK) or abort "unknown setup #{setup}"
        WARMUP.times { http.get(REQUEST_PATH) }
        http.get("/__gvlscope/gc-off") if GC_OFF
        allocated_before = Integer(http.get("/__gvlscope/allocated").body)
        results[setup] << puma.window(setup) { REQUESTS.times { http.get(REQUEST_PATH) } }.fdiv(REQUESTS)
        allocations[setup] << (Integer(http.get("/__gvlscope/allocated").body) - allocated_before).fdiv(REQUESTS)
        http.get("/__gvlscope/gc-on") if GC_OFF
        warn format("%-17s %10.0f instructions, %6.1f objects per request", setup, results[setup].last, allocations[setup].last)
      end
    end
  ensure
    puma.stop
  end
end

runs = results.transform_values(&:dup)
results = results.transform_values(&:min)
objects = allocations.transform_values(&:min)
plain = results["plain"]
puts "ruby #{RUBY_VERSION}, puma #{Gem.loaded_specs['puma']&.version}, #{RAILS ? 'Rails GET /records' : 'hello world'}, " \
     "#{REQUESTS} keep-alive requests per setup under callgrind, #{GC_OFF ? 'GC off in the windows' : 'GC on'}, " \
     "minimum of #{ROUNDS} rounds"
puts "| setup | instructions per request | added | added / plain | objects per request | rounds |"
puts "|---|---:|---:|---:|---:|---|"
results.each do |setup, per_request|
  added = plain && setup != "plain" ? per_request - plain : nil
  puts format("| %s | %.0f | %s | %s | %.1f | %s |", setup, per_request, added ? format("%+.0f", added) : "-",
              added ? format("%+.2f%%", 100 * added / plain) : "-", objects[setup], runs[setup].map(&:round).join(", "))
end
