# frozen_string_literal: true

# The counters and the HTTP case again, with Ractors (Ivo Anjo 2023, examples 7 and 7-2): each
# Ractor has its own GVL, so two counting Ractors run in parallel on 2 cores, and a counting
# Ractor does not slow down HTTP requests made by a thread of the main Ractor.
require_relative "lab_helper"
require "etc"
include LabHelper

Warning[:experimental] = false
work = iterations_for(size(tiny: 0.2, small: 0.7, full: 4.0))
timings = alternating(size(tiny: 1, small: 3, full: 3), {
  threads: -> { 2.times.map { Thread.new { countdown(work) } }.each(&:join) },
  ractors: -> { 2.times.map { Ractor.new(work) { |count| count -= 1 while count.positive?; count } }.each { |ractor| RactorResult.of(ractor) } },
})
threads, ractors = timings.values_at(:threads, :ractors)
say format("2 threads counting:  %.2f s; 2 Ractors counting: %.2f s (medians)", threads, ractors)

window = size(tiny: 0.5, small: 3.0, full: 10.0)
server, port = http_server(0.05)
begin
  requests_in(port, 0.2)
  alone = requests_in(port, window)
  counter = Ractor.new(now + window + 1.0) do |deadline|
    x = 0
    x += 1 while Process.clock_gettime(Process::CLOCK_MONOTONIC) < deadline
    x
  end
  beside = requests_in(port, window)
  RactorResult.of(counter)
ensure
  stop_helper(server)
end
say format("HTTP alone: %.2f requests/s; beside a counting Ractor: %.2f requests/s", alone, beside)
result(threads_s: threads, ractors_s: ractors, cores: Etc.nprocessors, alone_rps: alone, beside_ractor_rps: beside)
