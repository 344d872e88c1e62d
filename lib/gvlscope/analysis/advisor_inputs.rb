# frozen_string_literal: true

require_relative "../support/errors"
require_relative "../support/counters"
require_relative "advisor"

module GVLScope
  module Analysis
    # The advisor's three inputs made into one Advisor::Workload: a trace (through its
    # Analysis::Report), a metrics snapshot file, a live process (two Live snapshots an interval
    # apart). The same numbers give the same Workload whichever way they came.
    module AdvisorInputs
      # A thread's numbers, whichever input they came from.
      # io_overlap_wait_ns: the part of wait_ns that IO the thread had started overlapped (Metrics).
      # code: where it held the GVL ("`Pricer#spin` (pricer.rb:8)"), when the input says (a trace
      # with stacks, a snapshot with code locations), or nil.
      Row = Struct.new(:label, :run_ns, :gc_ns, :wait_ns, :idle_ns, :excluded_idle_ns, :io_overlap_wait_ns, :code,
                       keyword_init: true) do
        include Counters::Sums
      end

      # A thread that held the GVL this share of the time or more decides how long the others wait
      # for it, whatever their number (Rules::Hog's case): advise names it before any count.
      HOG_SHARE = 0.5

      # The hook's bounds for io_overlap_wait_ns (ext/gvlscope/metrics_event.h; the report engine's
      # in ext/gvlscope_engine/pass.c; test/analysis/advise_test.rb checks they agree with Native's): a
      # release shorter than QUICK_RELEASE_NS returned at once; a hold of OVERLAP_HOLD_NS or more
      # is other work.
      QUICK_RELEASE_NS = 1_000_000
      OVERLAP_HOLD_NS = 1_000_000

      module_function

      # The pool a thread belongs to: its label without numbers or creation site, so "puma srv tp
      # 001" .. "puma srv tp 005" (or "worker 1", "worker 2") are one pool.
      def pool_key(label) = label.to_s.sub(/\s*\(.*\)\z/, "").gsub(/\d+/, "#")

      # [the pool's rows, its name, the other rows]. +pattern+ (a regexp source, --threads)
      # chooses the pool; by default it is the group of same-named threads (two or more) that held
      # the GVL longest.
      def pick_pool(rows, pattern, source)
        raise Error, "#{source}: no threads in it" if rows.empty?

        if pattern
          regexp = begin
            Regexp.new(pattern)
          rescue RegexpError => e
            raise Error, "--threads #{pattern.inspect}: not a regular expression (#{e.message})"
          end
          pool = rows.select { |row| regexp.match?(row.label) }
          if pool.empty?
            raise Error, "--threads #{pattern.inspect}: no thread of #{source} matches " \
                         "(threads: #{rows.map(&:label).uniq.first(12).join(', ')})"
          end
          return [pool, "/#{pattern}/", rows - pool]
        end

        # A pool is several threads of one name; a lone thread (main) only when there is no such group.
        groups = rows.group_by { |row| pool_key(row.label) }
        pools = groups.select { |_name, group| group.size >= 2 }
        name, pool = (pools.empty? ? groups : pools).max_by { |_name, group| group.sum(&:held_ns) }
        [pool, name, rows - pool]
      end

      # The thread that held the GVL HOG_SHARE of +wall_ns+ or more (an Advisor::Hog), or nil; not
      # the pool itself when it is that one thread (a CPU-bound program: the model's own case).
      def hog(rows, pool, wall_ns)
        row = rows.max_by(&:held_ns)
        return nil unless wall_ns.to_i.positive? && row && row.held_ns >= HOG_SHARE * wall_ns
        return nil if pool == [row]

        Advisor::Hog.new(label: row.label, held_ns: row.held_ns, share: [row.held_ns.fdiv(wall_ns), 1.0].min,
                         code: row.code, in_pool: pool.include?(row))
      end

      # The worker threads' numbers, added together; per request/job when +breakdown+ (entries
      # with count, run_ns, wait_ns, idle_ns, gc_ns) has any. +wall_ns+: the time the rows cover
      # (for Advisor::Hog; the window when nil).
      def workload(rows, source:, pattern:, held_ratio:, window_ns:, breakdown: nil, notes: [], wall_ns: window_ns)
        pool, name, others = pick_pool(rows, pattern, source)
        hog = hog(rows, pool, wall_ns)
        other_held = others.sum(&:held_ns)
        pool_held = pool.sum(&:held_ns)
        entries = Array(breakdown).select { |entry| entry[:count].to_i.positive? }
        sum = ->(key) { entries.sum { |entry| entry[key].to_i } }
        # The requests' own where the entries have it (a RequestTiming counts it), else the pool's
        # (per thread: it also counts waits between requests), as for per-request numbers its
        # run-queue wait is (Advisor#model_kinds divides both by the count).
        overlap = pool.sum { |row| row.io_overlap_wait_ns.to_i }
        overlap = entries.sum { |entry| entry[:io_overlap_wait_ns] } if !entries.empty? && entries.all? { |entry| entry[:io_overlap_wait_ns] }
        if entries.empty?
          Advisor::Workload.new(source: source, unit: :thread, count: nil, run_ns: pool.sum(&:run_ns),
                                gc_ns: pool.sum(&:gc_ns), wait_ns: pool.sum(&:wait_ns), idle_ns: pool.sum(&:idle_ns),
                                excluded_idle_ns: pool.sum { |row| row.excluded_idle_ns.to_i }, other_held_ns: other_held,
                                pool_held_ns: pool_held, threads: pool.size, pool: name, held_ratio: held_ratio,
                                window_ns: window_ns, notes: notes, pool_labels: pool.map(&:label).uniq,
                                io_overlap_wait_ns: overlap, hog: hog)
        else
          units = entries.map { |entry| entry[:kind].to_s }.uniq
          Advisor::Workload.new(source: source, unit: units == ["job"] ? :job : :request, count: sum.(:count),
                                run_ns: sum.(:run_ns), gc_ns: sum.(:gc_ns), wait_ns: sum.(:wait_ns), idle_ns: sum.(:idle_ns),
                                excluded_idle_ns: 0, other_held_ns: other_held, pool_held_ns: pool_held,
                                threads: pool.size, pool: name, held_ratio: held_ratio, window_ns: window_ns, notes: notes,
                                pool_labels: pool.map(&:label).uniq, io_overlap_wait_ns: overlap,
                                kinds: work_kinds(entries), hog: hog)
        end
      end

      # The entries as the model's kinds (one per route or job class with its tags: a series), when
      # there are two or more; else nil.
      def work_kinds(entries)
        return nil if entries.size < 2

        entries.map do |entry|
          label = entry[:tags].is_a?(Hash) && !entry[:tags].empty? ? "#{entry[:label]} #{entry[:tags].map { |k, v| "#{k}=#{v}" }.join(',')}" : entry[:label].to_s
          # (a sum below zero, from a file, is none: the model's times cannot go back)
          Advisor::WorkKind.new(label: label, count: entry[:count].to_i,
                                io_overlap_wait_ns: entry[:io_overlap_wait_ns] && [entry[:io_overlap_wait_ns], 0].max,
                                **%i[run_ns gc_ns wait_ns idle_ns].to_h { |key| [key, [entry[key].to_i, 0].max] })
        end
      end

      # From a trace: the Report's per-thread rows, idle split by reason (a trace knows why a thread
      # was idle; lock/queue/join idle is waiting for work, not the work's IO).
      def from_report(report, threads: nil)
        duration = report.duration_ns
        rows = report.all_rows.map do |row|
          excluded = row.idle_by_reason.sum { |reason, ns| Advisor::WORK_IDLE_REASONS.include?(reason) ? 0 : ns }
          # (the holder's code only for a thread that may be the hog: a profile per thread costs)
          code = report.code_locations.holder_profile(thread: row.serial).first&.name if row.held_ns >= HOG_SHARE * duration
          Row.new(label: row.label, run_ns: row.run_ns, gc_ns: row.gc_ns, wait_ns: row.wait_ns,
                  idle_ns: row.idle_ns - excluded, excluded_idle_ns: excluded, io_overlap_wait_ns: row.io_overlap_wait_ns,
                  code: code)
        end
        # (the busiest Ractor's share, as the report's: each Ractor has a GVL of its own)
        held = report.held_ratio_by_ractor.values.max.to_f
        workload(rows, source: "trace #{File.basename(report.file.path.to_s)}", pattern: threads,
                       held_ratio: held, window_ns: duration)
      end

      # From live snapshots (Live::Snapshot: a snapshot file, Live.fetch): +later+ alone (counts
      # since metrics started in the target) or the interval from +earlier+ to +later+.
      # +breakdown+: per-request/per-job entries (Hashes) for the same span; by default the snapshots'
      # own (Live::Snapshot#breakdown: a live socket serves them where GVLScope::Rack or
      # GVLScope::Sidekiq counts, a snapshot file may carry them).
      # A Prometheus scrape has no per-thread rows: +current_threads+ (the threads each process
      # runs now) then turns its GVL held and wait into per-thread shares.
      def from_live(later, earlier = nil, source:, threads: nil, current_threads: nil, breakdown: nil)
        snapshot = earlier ? later - earlier : later
        breakdown ||= snapshot.breakdown unless snapshot.breakdown.empty?
        window = snapshot.interval_ns
        if snapshot.threads.empty?
          return from_process_totals(snapshot, source: source, current_threads: current_threads, window_ns: window)
        end

        rows = snapshot.threads.map do |row|
          Row.new(label: row.label.to_s, run_ns: row.run_ns, gc_ns: row.gc_ns, wait_ns: row.wait_ns, idle_ns: row.idle_ns,
                  excluded_idle_ns: 0, io_overlap_wait_ns: row.io_overlap_wait_ns.to_i,
                  code: row.code && (row.code["holding"] || row.code["at"]))
        end
        workload(rows, source: source, pattern: threads, held_ratio: snapshot.held_ratio, window_ns: window,
                       breakdown: breakdown, wall_ns: snapshot.wall_ns)
      end

      # Linux: how long the threads of process +pid+ spent runnable but waiting for a CPU core (the
      # run-queue wait in /proc/PID/task/TID/schedstat), summed by thread name (comm: Linux cuts a
      # thread's name to 15 bytes); nil where there is no such file. Read at both ends of a live
      # interval, the difference is time the GVL's events counted as idle (a thread back from a
      # syscall that finds every core busy) or as run (a holder the kernel set aside).
      COMM_BYTES = 15

      def cpu_wait_by_name(pid, proc_root: "/proc") = schedstat_by_name(pid, :run_queue, proc_root: proc_root)

      # schedstat's fields: ns on a CPU, ns runnable but waiting for one (then the timeslices run).
      SCHEDSTAT_FIELDS = { cpu: 0, run_queue: 1 }.freeze

      # One schedstat field of process +pid+'s threads (+field+: :cpu or :run_queue), summed by
      # thread name; nil where there is no such file.
      def schedstat_by_name(pid, field, proc_root: "/proc")
        index = SCHEDSTAT_FIELDS.fetch(field)
        tasks = Dir.glob(File.join(proc_root, pid.to_s, "task", "*"))
        return nil if tasks.empty?

        tasks.each_with_object(Hash.new(0)) do |task, sums|
          sums[File.read(File.join(task, "comm")).chomp.b] += Integer(File.read(File.join(task, "schedstat")).split[index])
        rescue SystemCallError, ArgumentError, TypeError
          nil # a thread that exited between the listing and the read
        end
      end

      # The pool's share of what grew between two schedstat_by_name readings (run-queue wait, or
      # CPU time); nil without them or when no thread carries a pool thread's name (names set from
      # Ruby reach Linux; unnamed threads do not).
      def pool_schedstat_ns(before, after, labels)
        return nil unless before && after

        names = labels.map { |label| label.b.byteslice(0, COMM_BYTES) }.uniq.select { |name| after.key?(name) }
        return nil if names.empty?

        names.sum { |name| [after[name] - before.fetch(name, 0), 0].max }
      end

      # A scrape's process totals as a pool of +current_threads+ alike threads: together they held
      # the GVL held_ns and waited wait_ns; the rest of their time (threads x wall) was idle.
      def from_process_totals(snapshot, source:, current_threads:, window_ns:)
        unless current_threads
          raise Error, "#{source} has no per-thread numbers (a Prometheus scrape): give --current-threads N, " \
                       "the threads each process runs now"
        end

        # wall_ns adds up the workers' wall times: threads x wall_ns is every worker's pool.
        capacity = current_threads * snapshot.wall_ns
        idle = capacity - snapshot.held_ns - snapshot.wait_ns
        if idle.negative?
          raise Error, "--current-threads #{current_threads}: fewer than the threads #{source} shows holding or waiting " \
                       "for the GVL (#{format('%.1f', (snapshot.held_ns + snapshot.wait_ns).fdiv(snapshot.wall_ns))} on average)"
        end
        raise Error, "#{source}: the GVL was never held: nothing to advise from" unless snapshot.held_ns.positive?

        Advisor::Workload.new(source: source, unit: :thread, count: nil, run_ns: snapshot.held_ns, gc_ns: 0,
                              wait_ns: snapshot.wait_ns, idle_ns: idle, excluded_idle_ns: 0, other_held_ns: 0,
                              pool_held_ns: snapshot.held_ns, threads: current_threads,
                              pool: "#{current_threads} threads per process (--current-threads)",
                              held_ratio: snapshot.held_ratio, window_ns: window_ns, processes: snapshot.processes,
                              notes: ["a scrape gives process totals: run includes GC, and every GVL hold is " \
                                      "counted as the workers' own"])
      end
    end
  end
end
