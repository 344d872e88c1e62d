# frozen_string_literal: true

# CPU-bound threads take turns one timeslice at a time, first come first served (Ivo Anjo 2023,
# examples 1 and 2): with 2 threads each waits about 1 timeslice between its turns, with 10 about
# 9. Each thread is given enough work for several turns of this machine's CPU. The waits are read
# from the trace (lib/gvlscope/lab/scenarios.rb).
require_relative "lab_helper"
include LabHelper

turns = size(tiny: 2, small: 4, full: 10)
timings = [2, 10].to_h do |count|
  work = iterations_for(turns * timeslice_ms / 1000.0)
  took = seconds do
    count.times.map { |n| Thread.new { Thread.current.name = "counter #{count}.#{n}"; countdown(work) } }.each(&:join)
  end
  say format("%2d threads, %d turns of work each: %.2f s", count, turns, took)
  ["threads_#{count}_s", took]
end
result(**timings, turns: turns, timeslice_ms: timeslice_ms)
