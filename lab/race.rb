# frozen_string_literal: true

# The 50-thread race from Ivo Anjo's RubyKaigi 2023 talk: threads move units from one counter to
# another (`from -= 1; to += 1` while from > 0). Without a Mutex the published run ended with
# 100,000,011 units moved out of 100,000,000; with a Mutex, exactly 100,000,000. CRuby switches
# threads only at certain points, so whether (and how much) the unsynchronized total goes wrong
# depends on the Ruby and the machine: this scenario reports what happens here.
require_relative "lab_helper"
include LabHelper

THREADS = 50
units = iterations_for(size(tiny: 0.2, small: 1.5, full: 4.0)) / 2

def move(units, lock)
  from = units
  to = 0
  workers_ran = 0
  counting = Mutex.new
  threads = THREADS.times.map do
    Thread.new do
      moved = 0
      if lock
        loop do
          took = lock.synchronize { from.positive? && (from -= 1; to += 1) }
          break unless took

          moved += 1
        end
      else
        while from.positive?
          from -= 1
          to += 1
          moved += 1
        end
      end
      counting.synchronize { workers_ran += 1 } if moved.positive?
    end
  end
  threads.each(&:join)
  [to, workers_ran]
end

unsynchronized, ran = move(units, nil)
say "without a Mutex: moved #{unsynchronized} of #{units} (#{format('%+d', unsynchronized - units)}); #{ran} of #{THREADS} threads got to move any"
locked_units = size(tiny: 2_000, small: 20_000, full: 100_000) # a Mutex hand-off per unit is slow
locked, = move(locked_units, Mutex.new)
say "with a Mutex:    moved #{locked} of #{locked_units} (#{format('%+d', locked - locked_units)})"
result(units: units, unsynchronized_moved: unsynchronized, workers_ran: ran, locked_units: locked_units, locked_moved: locked)
