# frozen_string_literal: true

# Beazley's countdown (PyCon 2010), in Ruby: count down N sequentially, then N/2 in each of two
# threads, then N/2 in each of two Ractors. Threads share one GVL: no faster than sequential.
# Ractors each have their own: about twice as fast on 2 or more cores.
require_relative "lab_helper"
require "etc"
include LabHelper

Warning[:experimental] = false
work = iterations_for(size(tiny: 0.1, small: 0.7, full: 4.0))
say "counting down #{work} (about #{size(tiny: 0.1, small: 0.7, full: 4.0)} s of this machine's CPU)"
timings = alternating(size(tiny: 1, small: 3, full: 3), {
  sequential: -> { countdown(work) },
  threads: -> { 2.times.map { |n| Thread.new { Thread.current.name = "countdown #{n}"; countdown(work / 2) } }.each(&:join) },
  ractors: lambda {
    2.times.map { Ractor.new(work / 2) { |count| count -= 1 while count.positive?; count } }.each { |ractor| RactorResult.of(ractor) }
  },
})
sequential, threads, ractors = timings.values_at(:sequential, :threads, :ractors)
say format("median of %d rounds: sequential %.2f s, 2 threads %.2f s, 2 Ractors %.2f s",
           size(tiny: 1, small: 3, full: 3), sequential, threads, ractors)
result(sequential_s: sequential, threads_s: threads, ractors_s: ractors, cores: Etc.nprocessors)
