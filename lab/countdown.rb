# frozen_string_literal: true

# Beazley's countdown (PyCon 2010), in Ruby: count down N sequentially, then N/2 in each of two
# threads, then N/2 in each of two Ractors. Threads share one GVL: no faster than sequential.
# Ractors each have their own: about twice as fast on 2 or more cores.
require_relative "lab_helper"
require "etc"
include LabHelper

Warning[:experimental] = false
work = iterations_for(size(tiny: 0.1, small: 1.0, full: 4.0))
say "counting down #{work} (about #{size(tiny: 0.1, small: 1.0, full: 4.0)} s of this machine's CPU)"
sequential = seconds { countdown(work) }
say format("sequential:  %.2f s", sequential)
threads = seconds { 2.times.map { |n| Thread.new { Thread.current.name = "countdown #{n}"; countdown(work / 2) } }.each(&:join) }
say format("2 threads:   %.2f s", threads)
ractors = seconds do
  2.times.map do
    Ractor.new(work / 2) do |count|
      count -= 1 while count.positive?
      count
    end
  end.each { |ractor| ractor.respond_to?(:value) ? ractor.value : ractor.take }
end
say format("2 Ractors:   %.2f s", ractors)
result(sequential_s: sequential, threads_s: threads, ractors_s: ractors, cores: Etc.nprocessors)
