# frozen_string_literal: true

# Koichi Sasada's ring (lab/thread_ring.rb): n threads in a ring, each popping a token from its
# Queue and pushing it to the next one's. Measures thread creation per thread and time per hop, for n = 1,000 and 10,000 (100,000 with --size full). Run it with and
# without --mn (RUBY_MN_THREADS=1, Ruby 3.3+) to compare 1:1 and M:N threads.
require_relative "lab_helper"
require_relative "thread_ring"
require_relative "../lib/gvlscope/lab/map_limit"
include LabHelper

LAPS = 3

def ring(count)
  ring = nil
  created = seconds { ring = ThreadRing.new(count) }
  hops = nil
  lapped = seconds { hops = ring.lap(LAPS) }
  ring.close
  { create_us_per_thread: created * 1e6 / count, us_per_hop: lapped * 1e6 / (LAPS * count), delivered: hops == LAPS * count }
rescue ThreadError => e
  { error: "#{e.message} after #{Thread.list.size} threads" }
end

counts = size(tiny: [200, 1_000], small: [1_000, 10_000], full: [1_000, 10_000, 100_000])
results = counts.to_h do |count|
  # Past vm.max_map_count CRuby dies ("[FATAL] failed to allocate memory"): skip, say why.
  if (problem = GVLScope::Lab::MapLimit.problem(count))
    say "#{count} threads: skipped: #{problem}"
    next [count.to_s, { skipped: problem }]
  end
  measured = ring(count)
  say(measured[:error] ? "#{count} threads: #{measured[:error]}" :
      format("%6d threads: create %.1f us/thread, %.2f us/hop, token delivered: %s", count,
             measured[:create_us_per_thread], measured[:us_per_hop], measured[:delivered]))
  [count.to_s, measured]
end
result(rings: results, mn: ENV["RUBY_MN_THREADS"] == "1")
