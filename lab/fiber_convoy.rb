# frozen_string_literal: true

# The fiber convoy: the GVL's convoy on an event loop. One thread runs a Fiber scheduler
# (lab/tiny_scheduler.rb, select-based as async's reactor is epoll-based) serving one-line
# requests through GVLScope::Rack, as Falcon does; a client in another process sends requests one
# at a time at random gaps. First alone, then beside a fiber that burns CPU in turns of TURN_MS
# (it yields to the loop between them, as a CPU-heavy request that never does IO yields only at
# its end). No thread waits for the GVL: each request waits for the loop, up to a turn.
require_relative "lab_helper"
require_relative "tiny_scheduler"
require "gvlscope/rack"
include LabHelper

TURN_MS = 50

CLIENT = LabHelper::CLIENT_PROLOGUE + <<~'RUBY'
  random = Random.new(7)
  samples = count.times.map do
    sleep(0.005 + random.rand(0.015)) # users do not choose when their requests come
    started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    socket.write("GET\n")
    loop_wait_ms = Float(socket.gets)
    [(Process.clock_gettime(Process::CLOCK_MONOTONIC) - started) * 1000, loop_wait_ms]
  end
  socket.close
  puts JSON.generate(samples)
RUBY

# What Falcon gives a Rack app: env["protocol.http.request"].connection.stream.io is the socket.
Stream = Struct.new(:io)
Connection = Struct.new(:stream)
Request = Struct.new(:connection)

def burn_a_turn(ms)
  deadline = Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) + ms / 1000.0
  x = 0
  x += 1 while Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) < deadline
end

# One phase: the loop serves the client's +count+ requests (beside the CPU fiber when +cpu+).
def phase(count, cpu:)
  app = GVLScope::Rack.new(->(env) { [200, {}, [env["gvlscope"]]] }, route: false)
  server = TCPServer.new("127.0.0.1", 0)
  stop = false
  samples = nil
  loop_thread = Thread.new do
    Thread.current.name = "loop"
    Fiber.set_scheduler(TinyScheduler.new)
    Fiber.schedule do
      connection = server.accept
      while connection.gets
        timing = app.call({ "REQUEST_METHOD" => "GET", "PATH_INFO" => "/quick",
                            "protocol.http.request" => Request.new(Connection.new(Stream.new(connection))) })[2].first
        connection.write("#{timing.loop_wait_ms}\n")
      end
      connection.close
      stop = true
    end
    if cpu
      Fiber.schedule do
        until stop
          burn_a_turn(TURN_MS)
          sleep 0 # back to the loop: one turn over
        end
      end
    end
  end
  pid, _ready, output = spawn_helper(CLIENT, server.addr[1].to_s, count.to_s)
  samples = JSON.parse(output.read.lines.last)
  Process.wait(pid)
  loop_thread.join
  server.close
  samples
end

GVLScope::Metrics.enable
GVLScope::EventLoops.track
alone = phase(size(tiny: 10, small: 30, full: 100), cpu: false)
alone_ms = GVLScope::Units.median(alone.map(&:first))
say format("alone:               %8.2f ms per request", alone_ms)
beside = phase(size(tiny: 10, small: 30, full: 100), cpu: true)
beside_ms = GVLScope::Units.median(beside.map(&:first))
delayed = beside.select { |latency, _| latency - alone_ms >= 5 }
coverage = delayed.map { |latency, loop_wait| loop_wait / (latency - alone_ms) }
say format("beside a CPU fiber:  %8.2f ms per request (turns of %d ms); loop-wait covers %s of the added latency",
           beside_ms, TURN_MS, coverage.empty? ? "-" : format("%.2f", GVLScope::Units.median(coverage)))
result(alone_ms: alone_ms, beside_ms: beside_ms, turn_ms: TURN_MS, delayed: delayed.size, requests: beside.size,
       coverage_median: coverage.empty? ? nil : GVLScope::Units.median(coverage),
       covered: coverage.count { |ratio| ratio >= 0.8 })
