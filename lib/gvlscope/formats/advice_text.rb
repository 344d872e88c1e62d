# frozen_string_literal: true

require_relative "format"
require_relative "../support/units"
require_relative "../analysis/advisor"

module GVLScope
  module Formats
    # An Analysis::Advisor::Advice as text: what `gvlscope advise` prints. The recommendation first,
    # then the measured shares, the model with its numbers, the processes, and what would change it.
    class AdviceText < Format
      CURVE_ROWS = 12 # rows of the model's table around the recommendation and the current count
      WIDTH = 100 # sentences wrap here

      def write(io)
        advice = @subject
        io << (headline(advice) + [""] + measured(advice) + [""] + model(advice) + [""] +
               ["Processes:", *wrap(advice.processes_reasoning, "  "), "", "What would change the answer:"] +
               advice.what_would_change.flat_map { |line| wrap(line, "  - ", "    ") }).join("\n") << "\n"
      end

      private

      # +text+ in lines of at most WIDTH, the first after +first+, the others after +rest+.
      def wrap(text, first, rest = " " * first.size)
        lines = []
        line = first.dup
        empty = true
        text.split(" ").each do |word|
          if !empty && line.size + 1 + word.size > WIDTH
            lines << line
            line = rest.dup
            empty = true
          end
          line << " " unless empty
          line << word
          empty = false
        end
        lines << line
      end

      def plural(count, word) = Analysis::Advisor.count(count, word)

      # The count; first, when a thread held the GVL most of the time, that no count fixes it.
      def headline(advice)
        text = "#{plural(advice.threads, 'thread')} per process"
        text += advice.processes == advice.current_processes ? "" : ", #{plural(advice.processes, 'process')}"
        count = "#{text} (now #{plural(advice.current_threads, 'thread')} x #{plural(advice.current_processes, 'process')}, " \
                "#{plural(advice.cores, 'core')})"
        hog = advice.workload.hog
        return ["gvlscope advise: #{count}"] unless hog

        ["gvlscope advise: no thread count fixes this: #{hog}", *wrap(advice.hog_reason, "  "), "",
         *wrap("With its holds charged to the pool's work, the model's count: #{count}", "")]
      end

      def measured(advice)
        w = advice.workload
        shares = w.shares
        per = w.count.to_i.positive? ? "per #{w.unit} (#{w.count} #{w.unit}s)" : "per thread"
        window = w.window_ns.to_i.positive? ? ", #{format('%.1f', w.window_ns / 1e9)} s" : ""
        lines = ["Measured: #{w.source}#{window}; the pool: #{plural(w.threads, 'thread')} #{w.pool.inspect}"]
        lines << format("  %-22s run %.1f %%   GVL wait %.1f %%   idle %.1f %%   gc %.1f %%", per, 100 * shares[:run],
                        100 * shares[:wait], 100 * shares[:idle], 100 * shares[:gc])
        if w.count.to_i.positive?
          lines << "  per #{w.unit}: run #{Units.ms(w.run_ns / w.count)}, GVL wait #{Units.ms(w.wait_ns / w.count)}, " \
                   "idle #{Units.ms(w.idle_ns / w.count)}, gc #{Units.ms(w.gc_ns / w.count)}"
        end
        if w.excluded_idle_ns.to_i.positive?
          lines << format("  not counted: idle on locks, queues and joins (waiting for work), %.1f %% of the pool's time",
                          100.0 * w.excluded_idle_ns / (w.total_ns + w.excluded_idle_ns))
        end
        held = format("  GVL held %.1f %% of the time", 100 * w.held_ratio.to_f)
        if w.charge > 1.0005
          # Shares of the time, as the held share is (a ratio of holds can reach thousands of percent).
          others = w.held_ratio.to_f * (1 - 1 / w.charge)
          held += format(": the pool %.1f %%, other threads %.1f %% (charged to the pool's work)", 100 * (w.held_ratio.to_f - others), 100 * others)
        end
        lines << held
        if w.cpu_wait_ns
          lines << format("  waiting for a CPU core (Linux run-queue wait): %.1f %% of the pool's time, inside run and idle above",
                          100.0 * w.cpu_wait_ns / w.total_ns)
          if w.cpu_ns
            lines << format("  on a CPU core: %.1f %% of the pool's time (its GVL run + GC: %.1f %%)", 100.0 * w.cpu_ns / w.total_ns,
                            100.0 * w.held_ns / w.total_ns)
          end
        end
        w.notes.to_a.each { |note| lines << "  note: #{note}" }
        lines
      end

      def model(advice)
        per_request = advice.per_request?
        solved = if advice.kinds
                   "simulated #{advice.unit_name} by #{advice.unit_name} with #{advice.kinds.size} kinds of " \
                     "#{advice.unit_name} (exponential times around each kind's D and Z)"
                 else
                   "solved by mean value analysis"
                 end
        lines = wrap("Model: one GVL and threads going round: idle (IO, sleep) for Z, in line for the GVL (wait), then " \
                     "holding it for D (run + GC). A closed queueing network, #{solved} for each " \
                     "thread count: the GVL's busy share (= throughput / the most one GVL allows) and the GVL wait " \
                     "per #{advice.unit_name}.", "", "  ")
        advice.reasoning.each { |line| lines.concat(wrap(line, "  - ", "    ")) }
        lines << ""
        lines << format("  %-9s %-10s %s", "threads", "GVL busy", per_request ? "GVL wait per #{advice.unit_name}" : "GVL wait (x run time)")
        rows_shown(advice).each do |threads|
          point = advice.point(threads)
          wait = per_request ? Units.ms(advice.wait_ns_at(threads)) : format("%.2f", point.wait_per_demand)
          marks = []
          marks << "<- recommended" if threads == advice.threads
          marks << "(now)" if threads == advice.current_threads
          lines << format("  %-9d %-10s %-12s %s", threads, format("%.1f %%", 100 * point.busy), wait, marks.join(" ")).rstrip
        end
        lines
      end

      # 1..a few past the recommendation and the current count.
      def rows_shown(advice)
        last = [[advice.threads, advice.current_threads].max + 2, advice.curve.size].min
        shown = (1..last).to_a
        return shown if shown.size <= CURVE_ROWS

        keep = [1, advice.threads - 1, advice.threads, advice.threads + 1, advice.current_threads, last]
        shown.select { |t| keep.include?(t) || t <= 3 }.uniq
      end
    end
  end
end
