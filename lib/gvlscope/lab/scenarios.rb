# frozen_string_literal: true

# The lab's scenarios and their claims. Each claim's tolerance says why its bounds are where
# they are; numbers come from the scenario program (lab/*.rb) and, through +from_trace+, from the
# scenario's own trace and gvlscope report.
require_relative "../lab"
require_relative "../support/units"

module GVLScope
  module Lab
    # The timeslice a CPU-bound thread gets, in ms: RUBY_THREAD_TIMESLICE (3.4+), shifted by the
    # thread's priority as CRuby does (priority p: slice << p, or >> -p), and never under the
    # timer's 10 ms tick.
    def self.effective_slice_ms(measured)
      slice = measured.fetch(:timeslice_ms).to_f
      priority = measured.fetch(:priority, 0)
      slice = priority.negative? ? slice / 2**-priority : slice * 2**priority
      [(slice / 10.0).ceil * 10, 10].max
    end

    GENERIC_REASONS = "Ruby version (the scheduler changed in 3.3 and 3.4), the number of free cores, " \
                      "and other work on the machine"

    def self.claim(text, published:, tolerance:, measured:, holds:, applies: nil, differs_because: GENERIC_REASONS)
      Claim.new(text: text, published: published, tolerance: tolerance, measured: measured, holds: holds, applies: applies,
                differs_because: differs_because)
    end

    RACTOR_REASONS = "Ractors run in parallel only on free cores: on a 2-core machine the other core may be busy; " \
                     "and Ractor speed varies by Ruby (RubyConf 2024: 10 Ractors took 0.90 s on 3.2.5, 26.3 s on 3.3.5)"


    ms = ->(value) { format("%.1f ms", value) }
    two_cores = ->(m) { m.fetch(:cores) >= 2 ? nil : "needs 2 or more cores (this machine has #{m.fetch(:cores)})" }
    finding = lambda do |report, kind, thread|
      report.findings.find { |f| f.kind == kind && f.about.include?(thread) }
    end
    median_wait_ms = lambda do |timeline, prefix|
      waits = timeline.threads.values.select { |t| t.label.start_with?(prefix) }.flat_map do |thread|
        thread.intervals.select { |i| i.state == :wait }.map(&:duration_ns)
      end
      waits.empty? ? nil : waits.sort[waits.size / 2] / 1e6
    end

    define "countdown", file: "countdown.rb", seconds: 5,
           summary: "count down N: sequentially, in 2 threads, in 2 Ractors",
           source: "David Beazley, Understanding the Python GIL (PyCon 2010); the same on CRuby",
           claims: [
             claim("Two threads are no faster than one (one GVL: no parallel Ruby code)",
                   published: "Python 2.6: sequential 7.8 s, 2 threads 15.4 s",
                   tolerance: "threads take >= 0.8 x the sequential time: 20% for a noisy shared machine",
                   measured: ->(m) { format("sequential %.2f s, 2 threads %.2f s (x%.2f)", m[:sequential_s], m[:threads_s], m[:threads_s] / m[:sequential_s]) },
                   holds: ->(m) { m[:threads_s] >= 0.8 * m[:sequential_s] }),
             claim("Two Ractors are faster than sequential on 2 or more cores (a GVL each)",
                   published: "Ractors run in parallel (Ivo Anjo, RubyKaigi 2023: 10 Ractors 9.7 s vs 10 threads 49.8 s)",
                   tolerance: "Ractors take <= 0.75 x the sequential time (ideal 0.5; room for start-up and a busy neighbour)",
                   measured: ->(m) { format("sequential %.2f s, 2 Ractors %.2f s (x%.2f)", m[:sequential_s], m[:ractors_s], m[:ractors_s] / m[:sequential_s]) },
                   holds: ->(m) { m[:ractors_s] <= 0.75 * m[:sequential_s] }, applies: two_cores,
                   differs_because: RACTOR_REASONS),
           ]

    define "convoy", file: "convoy.rb", seconds: 10,
           summary: "TCP echo of 8 KB messages: alone, beside a CPU-bound thread, with the CPU work in a Ractor",
           source: "David Beazley (2010) convoy effect; Ivo Anjo, Ruby's unexpected IO vs CPU unfairness (2023)",
           from_trace: lambda { |_timeline, report|
             convoy = finding.call(report, :convoy, "echo")
             { convoy_found: !convoy.nil?, convoy_blames: convoy&.evidence&.dig(:holders)&.keys&.first }
           },
           claims: [
             claim("Beside a CPU-bound thread each message pays about one timeslice per blocking call",
                   published: "each blocking call costs up to a timeslice (100 ms) while a CPU-bound thread runs",
                   tolerance: "per message between 0.5x and 3x (syscalls per message x timeslice): a wait ends at the " \
                              "holder's next timeslice end, and the timeslice follows RUBY_THREAD_TIMESLICE and priority",
                   measured: ->(m) { format("%s per message, %.1f syscalls x %d ms = %s expected", ms.call(m[:beside_cpu_ms]), m[:syscalls_per_message], effective_slice_ms(m), ms.call(m[:syscalls_per_message] * effective_slice_ms(m))) },
                   holds: ->(m) { (0.5..3.0).cover?(m[:beside_cpu_ms] / (m[:syscalls_per_message] * effective_slice_ms(m))) }),
             claim("Alone, a message takes far less than a timeslice",
                   published: "sub-millisecond on loopback",
                   tolerance: "< 0.1 x timeslice",
                   measured: ->(m) { ms.call(m[:alone_ms]) },
                   holds: ->(m) { m[:alone_ms] < 0.1 * effective_slice_ms(m) }),
             claim("With the CPU work in a Ractor there is no convoy",
                   published: "Ivo Anjo 2023, example 7: throughput back to the alone case",
                   tolerance: "< 0.1 x timeslice per message",
                   measured: ->(m) { ms.call(m[:ractor_cpu_ms]) },
                   holds: ->(m) { m[:ractor_cpu_ms] < 0.1 * effective_slice_ms(m) }),
             claim("gvlscope report finds the convoy on 'echo' and blames 'cpu'",
                   published: "(gvlscope's own finding)",
                   tolerance: "the convoy finding names echo, and cpu held the GVL for most of its waits",
                   measured: ->(m) { m[:convoy_found] ? "found; most of the wait held by '#{m[:convoy_blames]}'" : "not found" },
                   holds: ->(m) { m[:convoy_found] && m[:convoy_blames] == "cpu" }),
           ]

    define "fiber-convoy", file: "fiber_convoy.rb", seconds: 8,
           summary: "one-line requests served on fibers of an event loop: alone, beside a fiber burning CPU in 50 ms turns",
           source: "Falcon's and fiber-profiler's docs: a fiber that does not yield stalls its loop; Node.js event-loop delay",
           claims: [
             claim("Beside a CPU-bound fiber a request waits for the loop, though no thread waits for the GVL",
                   published: "a fiber that does not yield stalls every other fiber of its loop (fiber-profiler)",
                   tolerance: "median between 0.2x and 3x a turn: a request arriving at random waits the rest of the " \
                              "turn in progress (half of one on average), and a loaded machine stretches a turn of CPU time",
                   measured: ->(m) { format("%s per request beside turns of %d ms", ms.call(m[:beside_ms]), m[:turn_ms]) },
                   holds: ->(m) { (0.2..3.0).cover?(m[:beside_ms] / m[:turn_ms]) }),
             claim("Alone, a request takes far less than a turn",
                   published: "sub-millisecond on loopback",
                   tolerance: "< 0.1 x the turn",
                   measured: ->(m) { ms.call(m[:alone_ms]) },
                   holds: ->(m) { m[:alone_ms] < 0.1 * m[:turn_ms] }),
             claim("gvlscope's loop-wait covers what the loop cost each delayed request",
                   published: "(gvlscope's own figure: Server-Timing loop-wait, docs/fibers.md)",
                   tolerance: "loop-wait >= 0.8 x (latency - the median alone) for 9 of 10 delayed requests: the " \
                              "arrival is the kernel's to a jiffy (4 ms at HZ 250), the rest is the loop's own work",
                   measured: ->(m) { format("%d of %d delayed requests covered (median %.2f)", m[:covered], m[:delayed], m[:coverage_median] || 0) },
                   holds: ->(m) { m[:delayed].positive? && m[:covered] >= 0.9 * m[:delayed] }),
           ]

    define "http-neighbour", file: "http_neighbour.rb", seconds: 10,
           summary: "sequential Net::HTTP GETs (server answers after 50 ms), alone and beside a counting thread",
           source: "Ivo Anjo, RubyKaigi 2023 (examples 5 and 6) and blog 2023-02-11",
           claims: [
             claim("Alone: about 16.7 requests/s",
                   published: "16.7 requests/s (slides); 16.571 i/s (blog, ~60 ms per request)",
                   tolerance: ">= 10 requests/s: the loopback server answers after 50 ms, so at most 20/s",
                   measured: ->(m) { format("%.1f requests/s", m[:alone_rps]) },
                   holds: ->(m) { m[:alone_rps] >= 10 }),
             claim("Beside a counting thread: about 1.45 requests/s, 10x fewer",
                   published: "1.45 requests/s (slides); 1.664 i/s (blog)",
                   tolerance: "alone / beside >= 5 (published 11.5x): several GVL releases per request, each a timeslice",
                   measured: ->(m) { format("%.2f requests/s (%.1fx fewer)", m[:beside_counter_rps], m[:alone_rps] / [m[:beside_counter_rps], 0.01].max) },
                   holds: ->(m) { m[:alone_rps] >= 5 * m[:beside_counter_rps] }),
           ]

    define "counters", file: "counters.rb", seconds: 8,
           summary: "2 and 10 CPU-bound threads taking turns",
           source: "Ivo Anjo, RubyKaigi 2023 (examples 1 and 2)",
           from_trace: lambda { |timeline, _report|
             { wait_2_ms: median_wait_ms.call(timeline, "counter 2."), wait_10_ms: median_wait_ms.call(timeline, "counter 10.") }
           },
           claims: [
             claim("2 threads: each waits about one timeslice between turns",
                   published: "median wait 100.0 ms, slices 100.1 ms",
                   tolerance: "median wait 0.7x-1.5x timeslice",
                   measured: ->(m) { format("median wait %s", ms.call(m[:wait_2_ms])) },
                   holds: ->(m) { (0.7..1.5).cover?(m[:wait_2_ms] / m[:timeslice_ms]) }),
             claim("10 threads: each waits about 9 timeslices (first come, first served)",
                   published: "median wait 901 ms",
                   tolerance: "median wait 0.7x-1.3x of 9 timeslices",
                   measured: ->(m) { format("median wait %s", ms.call(m[:wait_10_ms])) },
                   holds: ->(m) { (0.7..1.3).cover?(m[:wait_10_ms] / (9.0 * m[:timeslice_ms])) }),
           ]

    define "race", file: "race.rb", seconds: 5,
           summary: "50 threads moving units between two counters, without and with a Mutex",
           source: "Ivo Anjo, RubyKaigi 2023 (the 50-thread race); the program is reconstructed from the talk",
           claims: [
             claim("With a Mutex the count is exact",
                   published: "100,000,000 of 100,000,000",
                   tolerance: "exact",
                   measured: ->(m) { "#{m[:locked_moved]} of #{m[:locked_units]}" },
                   holds: ->(m) { m[:locked_moved] == m[:locked_units] }),
             claim("Without a Mutex the count goes wrong",
                   published: "100,000,011 of 100,000,000 (+11)",
                   tolerance: "any difference: the switch points depend on the Ruby, and the result may be right",
                   measured: ->(m) { format("%d of %d (%+d)", m[:unsynchronized_moved], m[:units], m[:unsynchronized_moved] - m[:units]) },
                   holds: ->(m) { m[:unsynchronized_moved] != m[:units] }),
             claim("The overshoot is the number of threads that got to move, minus one",
                   published: "(the lab notes' explanation of +11: a thread is switched out after its check, before its decrement)",
                   tolerance: "exact",
                   measured: ->(m) { format("%+d with %d threads moving", m[:unsynchronized_moved] - m[:units], m[:workers_ran]) },
                   holds: ->(m) { m[:unsynchronized_moved] - m[:units] == m[:workers_ran] - 1 }),
           ]

    define "producer-consumer", file: "producer_consumer.rb", seconds: 15,
           summary: "a producer and 2 printers: unbounded Queue vs SizedQueue(100)",
           source: "Dathan Bennett, Why Is Ruby Multithreading Slow? (2017)",
           from_trace: lambda { |_timeline, report|
             { hog_unbounded: !finding.call(report, :hog, "producer (Queue)").nil?,
               hog_sized: !finding.call(report, :hog, "producer (SizedQueue)").nil? }
           },
           claims: [
             claim("Unbounded Queue: about 10 lines/s",
                   published: "~30 lines in 3.4 s (~10 lines/s)",
                   tolerance: "<= 60 lines/s: one line per printer per timeslice is 20/s",
                   measured: ->(m) { format("%.1f lines/s (queue grew to %d)", m[:unbounded_lines_per_s], m[:unbounded_deepest]) },
                   holds: ->(m) { m[:unbounded_lines_per_s] <= 60 }),
             claim("SizedQueue(100): 100,000 items in about 3.5 s",
                   published: "~28,600 items/s",
                   tolerance: ">= 10,000 items/s",
                   measured: ->(m) { format("%d items in %.2f s (%.0f/s)", m[:sized_items], m[:sized_s], m[:sized_lines_per_s]) },
                   holds: ->(m) { m[:sized_lines_per_s] >= 10_000 }),
             claim("gvlscope report flags the unbounded producer as a hog, and not the sized one",
                   published: "(gvlscope's own finding)",
                   tolerance: "exact",
                   measured: ->(m) { "unbounded: #{m[:hog_unbounded] ? 'hog' : 'no finding'}; sized: #{m[:hog_sized] ? 'hog' : 'no finding'}" },
                   holds: ->(m) { m[:hog_unbounded] && !m[:hog_sized] }),
           ]

    define "ractors", file: "ractors.rb", seconds: 12,
           summary: "the counters and the HTTP case with Ractors",
           source: "Ivo Anjo, RubyKaigi 2023 (examples 7 and 7-2)",
           claims: [
             claim("Two counting Ractors run in parallel",
                   published: "10 Ractors 9.7 s vs 10 threads 49.8 s (many cores)",
                   tolerance: "Ractors take <= 0.75x the threads' time on 2+ cores",
                   measured: ->(m) { format("2 threads %.2f s, 2 Ractors %.2f s", m[:threads_s], m[:ractors_s]) },
                   holds: ->(m) { m[:ractors_s] <= 0.75 * m[:threads_s] }, applies: two_cores,
                   differs_because: RACTOR_REASONS),
             claim("A counting Ractor does not slow the main Ractor's HTTP requests",
                   published: "example 7: same throughput as alone",
                   tolerance: "beside >= 0.5x alone (the client, server and Ractor share 2 cores)",
                   measured: ->(m) { format("alone %.1f, beside a Ractor %.1f requests/s", m[:alone_rps], m[:beside_ractor_rps]) },
                   holds: ->(m) { m[:beside_ractor_rps] >= 0.5 * m[:alone_rps] }, applies: two_cores),
           ]

    # A ring skipped for vm.max_map_count (lab/ring.rb) says so; the claims judge the rings that ran.
    ran = ->(m) { m[:rings].reject { |_n, r| r[:skipped] } }
    hops = lambda do |m|
      m[:rings].map do |n, r|
        r[:skipped] ? "#{n}: skipped (vm.max_map_count)" : format("%s: %.1f us/hop, %.0f us/thread created", n, r[:us_per_hop], r[:create_us_per_thread])
      end.join("; ")
    end
    define "ring", file: "ring.rb", seconds: 15, threads: { "tiny" => 1_000, "small" => 10_000, "full" => 100_000 },
           summary: "a token passed around a ring of n threads through Queues (run with and without --mn)",
           source: "Koichi Sasada, Making MaNy threads on Ruby (RubyKaigi 2022), ko1/many_examples ring.rb",
           claims: [
             claim("The token goes around every ring",
                   published: "(correctness)",
                   tolerance: "exact",
                   measured: ->(m) { m[:rings].map { |n, r| "#{n}: #{r[:error] || (r[:skipped] && 'skipped (vm.max_map_count)') || (r[:delivered] ? 'ok' : 'lost')}" }.join(", ") },
                   holds: ->(m) { ran.(m).any? && ran.(m).values.all? { |r| r[:delivered] } }),
             claim("1:1 threads: a hop costs more in a bigger ring",
                   published: "2022 master: 15 us/hop at 1,000 threads, 170 us/hop at 10,000",
                   tolerance: "us/hop at the biggest ring >= at the smallest",
                   measured: hops,
                   holds: ->(m) { ran.(m).values.last[:us_per_hop] >= ran.(m).values.first[:us_per_hop] },
                   applies: ->(m) { "1:1 only (this run used --mn)" if m[:mn] }),
             claim("M:N threads: a hop costs about 1 us",
                   published: "2022 MaNy branch: 0.9 ms per lap of 1,000 threads",
                   tolerance: "<= 5 us/hop in the smallest ring",
                   measured: hops,
                   holds: ->(m) { ran.(m).values.first[:us_per_hop] <= 5 },
                   applies: ->(m) { "needs --mn" unless m[:mn] }),
           ]

    define "puma-wrk", file: "puma_wrk.rb", seconds: 15,
           summary: "hello-world Rack app on Puma (0-16 threads) under wrk -c 20 -t 10",
           source: "Balázs Kutilovič, DTracing the Ruby GVL (MRI 2.6.3, Puma 3.12)",
           from_trace: lambda { |timeline, report|
             holds = report.histograms[:hold_ns]
             # log2 buckets whose lower bound is 4096 ns ... 32768 ns: holds of ~4 us to ~64 us
             in_range = holds.each_index.sum { |b| (4096...65_536).cover?(Log2.lower(b)) ? holds[b] : 0 }
             waiters = report.histograms[:waiters_at_acquire]
             median_bucket = Log2.quantile_bucket(waiters, 0.5) || 0
             { held_ratio: report.held_ratio_by_ractor.values.max.to_f, holds: holds.sum,
               holds_4_64us_share: holds.sum.positive? ? in_range.fdiv(holds.sum) : 0.0,
               median_waiters: Log2.lower(median_bucket), threads: timeline.threads.size }
           },
           claims: [
             claim("GVL holds mostly last 4-64 us",
                   published: "326,000 holds in 10 s: 99% in 4-64 us, 82% in 8-32 us",
                   tolerance: ">= 50% of holds in the log2 buckets from 4 us to 64 us",
                   measured: ->(m) { format("%d%% of %d holds; GVL held %.0f%% of the time", (100 * m[:holds_4_64us_share]).round, m[:holds], 100 * m[:held_ratio]) },
                   holds: ->(m) { m[:holds_4_64us_share] >= 0.5 },
                   applies: ->(m) { "skipped: #{m[:skipped]}" if m[:skipped] }),
             claim("8-15 threads wait at each acquire (a saturated 16-thread server)",
                   published: "mostly 8-15 waiters",
                   tolerance: "median waiters bucket between 8 and 15",
                   measured: ->(m) { format("median waiters bucket %d (%.0f requests/s)", m[:median_waiters], m[:requests_per_s]) },
                   holds: ->(m) { (8..15).cover?(m[:median_waiters]) },
                   applies: ->(m) { "skipped: #{m[:skipped]}" if m[:skipped] }),
           ]

    # The thread sweep: `gvlscope advise` against a load test (lab/thread_sweep.rb; the knee and
    # the verdicts: lib/gvlscope/lab/sweep.rb).
    require_relative "sweep"
    sweep_mix = ->(m, mix) { m.fetch(:mixes).fetch(mix.to_sym) }
    sweep_judge = lambda do |m, mix|
      numbers = sweep_mix.(m, mix)
      Sweep.judge(numbers.fetch(:points), counts: m.fetch(:counts), recommended: numbers.fetch(:advisor).fetch(:threads))
    end
    sweep_claim = lambda do |mix, what|
      claim("#{mix}: the advisor's count is inside the measured knee",
            published: "(issue #20's target) #{what}",
            tolerance: "knee: the fewest threads with requests/s >= #{Sweep.percent(Sweep::THROUGHPUT)} of the best and p99 <= " \
                       "#{Sweep.percent(Sweep::LATENCY)} of the best (medians of the rounds); inside: the advisor's count meets both " \
                       "and is at most the next swept count above the knee",
            measured: lambda { |m|
              advisor = sweep_mix.(m, mix).fetch(:advisor)
              runs = advisor.fetch(:live_runs)
              median = runs.find { |run| run[:threads] == advisor[:threads] } # the round whose advice is the median
              trace = advisor.fetch(:trace)
              judgement = sweep_judge.(m, mix)
              format("advisor %d (the median of %d untraced runs at %d threads read live, one per round: %s; in its round " \
                     "run %.0f %%, GVL wait %.0f %%, idle %.0f %%, 1 / run share %.1f; the pool's CPU %s ms and GVL run %.2f ms " \
                     "per request; %.0f %% of its time waiting for a CPU core; %.0f %% waiting for the GVL while its IO " \
                     "was on its way, counted as idle%s); traced at %d threads: %d (run %.0f %%, " \
                     "GVL wait %.0f %%, idle %.0f %%, %.0f requests/s); knee %s; %s: %s", advisor[:threads], runs.size,
                     advisor[:from_threads], runs.map { |run| run[:threads] }.join(", "), 100 * median[:shares][:run],
                     100 * median[:shares][:wait], 100 * median[:shares][:idle], median[:no_collision_threads],
                     median[:cpu_ms_per_request] ? format("%.2f", median[:cpu_ms_per_request]) : "?",
                     median[:run_ms_per_request], 100 * median[:runqueue_share], 100 * median[:io_overlap_share].to_f,
                     if median[:kinds]
                       "; per endpoint (GVLScope::Rack's routes), hold D and idle Z: " +
                         median[:kinds].map { |k| format("%s D %.2f ms, Z %.2f ms", k[:label], k[:hold_ms], k[:idle_ms]) }.join("; ") +
                         "; as one mean request the answer would be #{median[:threads_as_one_kind]}"
                     else
                       ""
                     end,
                     trace[:from_threads], trace[:threads],
                     100 * trace[:shares][:run], 100 * trace[:shares][:wait], 100 * trace[:shares][:idle], trace[:rps],
                     judgement.knee || "none", judgement.verdict.to_s.tr("_", " "), judgement.reason)
            },
            holds: ->(m) { sweep_judge.(m, mix).inside? },
            applies: ->(m) { "skipped: #{m[:skipped]}" if m[:skipped] },
            differs_because: "IO hidden in GVL wait beyond what the hook counts (a wait that outlasts the IO it " \
                             "overlapped leaves nothing that blocks after it: research/io_overlap.rb; docs/advise.md, \"Why the mixed " \
                             "mix missed\"), noise on a shared machine (the load average and the spread of the rounds are below the " \
                             "table), CPU contention measured as idle or run " \
                             "(a thread back from a syscall waits for a core: the advisor counts it as IO; a holder set " \
                             "aside by the kernel counts as run), more threads taking a larger share of a busy machine's " \
                             "CPUs (which one GVL's model does not see), and the model's exponential hold and idle times " \
                             "(these endpoints vary less)")
    end
    define "thread-sweep", file: "thread_sweep.rb", seconds: 150,
           summary: "Puma under wrk -c 32: CPU-heavy, IO-heavy and mixed endpoints swept over 1-16 threads, beside " \
                    "`gvlscope advise` read live at Puma's default 5 threads in every round (and on a trace)",
           source: "gvlscope's own (issue #20): `gvlscope advise` against a load test",
           details: lambda { |m|
             lines = []
             if (low, mean, high = m[:load_average])
               lines << format("Load average while it ran (other work on the machine): %.1f to %.1f, mean %.1f, on %d cores.",
                               low, high, mean, m.fetch(:cores, Etc.nprocessors))
             end
             if (fastest = m[:fastest_speed])
               lines << format("The machine's speed (a 10 ms loop before and after each measurement) reached %.2f times what it " \
                               "was when the endpoints were sized: at its fastest their Ruby took %.0f %% of the milliseconds named below.",
                               fastest, 100 / fastest)
             end
             m.fetch(:mixes).each_key do |mix|
               judgement = sweep_judge.(m, mix)
               endpoints = sweep_mix.(m, mix).fetch(:endpoints).map { |e| format("%s %g ms Ruby + %g ms IO", e[:name], e[:cpu_ms], e[:io_ms]) }
               lines << "" unless lines.empty?
               numbers = sweep_mix.(m, mix)
               speed = if numbers[:slowest_kept]
                         format("; %d measurement(s) taken again with the machine below %.0f %% of its fastest, the slowest kept at %.0f %%",
                                numbers[:retries].to_i, 100 * m.fetch(:slow, 0.85), 100 * numbers[:slowest_kept])
                       end
               lines << "#{mix} (#{endpoints.join(', ')} per request; #{m[:rounds]} round(s) of #{m[:seconds]} s per count; " \
                        "#{m[:pinning]}#{speed}):"
               lines << ""
               lines.concat(Sweep.table(judgement))
             end
             lines
           },
           claims: [
             sweep_claim.("cpu-heavy", "CPU-bound: 1-2 threads"),
             sweep_claim.("io-heavy", "90 % IO: many threads"),
             sweep_claim.("mixed", "in between"),
           ]
  end
end
