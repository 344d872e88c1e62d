# frozen_string_literal: true

# The endpoint mixes of the thread-sweep scenario (lab/thread_sweep.rb, lab/thread_sweep_server.rb):
# what one request does. cpu_ms: CPU work holding the GVL; io_ms: a read from the delay server
# (the GVL is released while it waits). A mix of several endpoints picks one at random per request.
module ThreadSweepMixes
  CPU = { name: "cpu", cpu_ms: 4.0, io_ms: 0.0 }.freeze
  IO = { name: "io", cpu_ms: 1.0, io_ms: 9.0 }.freeze
  MIXES = {
    "cpu-heavy" => [CPU],
    "io-heavy" => [IO],
    "mixed" => [CPU, IO],
  }.freeze
end
