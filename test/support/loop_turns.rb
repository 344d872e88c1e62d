# frozen_string_literal: true

# loop.gvl's event loop (test/fixtures/traces/loop.rb, a real loop on lab/tiny_scheduler.rb), as
# the exports of its turns must show it (test/formats/fiber_views_test.rb, and the real viewers'
# tests).
module LoopTurns
  LOOP = File.join(GVLScopeTestHelper::ROOT, "test/fixtures/traces/loop.gvl")
  LOOP_THREAD = 2
  LOOP_NAME = "loop (loop.rb:16)"
  # loop.gvl's turns, [fiber, start_ns, end_ns]: five tasks each sleep 0 at once, then fiber 1
  # keeps the loop 60 ms in render_report, the others write and read, and fiber 1 ends.
  TURNS = [[1, 3_086_149, 3_153_141], [2, 3_193_116, 3_195_537], [3, 3_224_736, 3_226_667],
           [4, 3_271_825, 3_272_916], [5, 3_306_947, 3_363_713], [1, 3_431_485, 63_786_158],
           [2, 63_791_912, 64_028_880], [3, 64_030_411, 64_127_622], [4, 64_128_883, 64_192_933],
           [5, 64_236_521, 64_397_832], [1, 64_398_633, 64_500_336]].freeze
  LONG_TURN = 5 # the only long turn (10 ms or more): it has a site
  CODE = "Object#render_report (loop.rb:13)"
end
