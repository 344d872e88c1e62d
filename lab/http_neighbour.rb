# frozen_string_literal: true

# Ivo Anjo's "unexpected IO vs CPU unfairness" (2023): sequential Net::HTTP GETs to a server that
# answers after ~50 ms, alone and then beside a thread counting in a loop. Every GVL release
# during a request (connect, write, read, close, Timeout's helper thread) lets the counter keep
# the GVL for a whole timeslice. Published: 16.7 requests/s alone, 1.45 beside the counter.
require_relative "lab_helper"
include LabHelper

window = size(tiny: 0.5, small: 3.0, full: 10.0)
server, port = http_server(0.05)
begin
  requests_in(port, 0.2) # warm up: first connection, Net::HTTP loaded
  alone = requests_in(port, window)
  say format("alone:               %6.2f requests/s", alone)
  counter = cpu_thread(name: "counter")
  beside = requests_in(port, window)
  stop(counter)
  say format("beside a counter:    %6.2f requests/s", beside)
  result(alone_rps: alone, beside_counter_rps: beside, timeslice_ms: timeslice_ms)
ensure
  stop_helper(server)
end
