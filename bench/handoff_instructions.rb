# frozen_string_literal: true

# What following a connection from Puma's server thread to the request costs (Handoffs: a Ruby
# method prepended to Server#new_client that stamps the thread's GVL counters, and GVLScope::Rack's
# look-up of the stamp by env["puma.socket"]), counted by valgrind (callgrind): a Ruby runs CALLS
# hand-offs (new_client on a stand-in server, then a request through GVLScope::Rack) with and without
# the hand-offs installed, and another runs none; the difference over CALLS is per connection.
#
#   bundle exec ruby -Ilib bench/handoff_instructions.rb        (CALLS=20000; needs valgrind)
require "rbconfig"

ROOT = File.expand_path("..", __dir__)
CALLS = Integer(ENV.fetch("CALLS", 20_000))

abort "valgrind not found (apt-get install valgrind)" unless system("command -v valgrind >/dev/null")

PROGRAM = <<~'RUBY'
  require "gvlscope/rack"
  require "gvlscope/integrations/handoffs"
  require "socket"
  setup, calls = ARGV[0], Integer(ARGV[1])
  server = Class.new { def new_client(io, _listener) = io }.new
  if setup == "handoffs"
    server.class.prepend(GVLScope::Handoffs::PumaServer)
    GVLScope::Native.handoff_claim_in_rack = true
  end
  app = GVLScope::Rack.new(->(_env) { [200, {}, ["ok"]] }, server_timing: false, route: false)
  socket, _other = UNIXSocket.pair
  env = { "REQUEST_METHOD" => "GET", "PATH_INFO" => "/", "puma.socket" => socket }
  sleep 0.01 # a block: the server thread's wait for the connection, where its arrival is taken
  work = proc { server.new_client(socket, nil); app.call(env.dup) }
  1000.times(&work)
  calls.times(&work)
RUBY

def instructions(setup, calls)
  out = IO.popen(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", RbConfig.ruby, "-I", File.join(ROOT, "lib"),
                  "-e", PROGRAM, setup, calls.to_s], err: %i[child out], &:read)
  Integer(out[/refs:\s+([\d,]+)/, 1].delete(","))
end

per_call = %w[plain handoffs].to_h { |setup| [setup, (instructions(setup, CALLS) - instructions(setup, 0)).fdiv(CALLS)] }
puts "ruby #{RUBY_VERSION}, #{CALLS} connections in-process under callgrind"
puts "| setup | instructions per connection | added |"
puts "|---|---:|---:|"
per_call.each { |setup, n| puts format("| %s | %.0f | %s |", setup, n, setup == "plain" ? "-" : format("%+.0f", n - per_call["plain"])) }
