# frozen_string_literal: true

require_relative "../errors"
require_relative "advisor"

module GVLScope
  module Analysis
    # The advisor's three inputs made into one Advisor::Workload: a trace (through its
    # Analysis::Report), a metrics snapshot file, a live process (two Live snapshots an interval
    # apart). The same numbers give the same Workload whichever way they came.
    module AdvisorInputs
      # A thread's numbers, whichever input they came from.
      Row = Struct.new(:label, :run_ns, :gc_ns, :wait_ns, :idle_ns, :excluded_idle_ns, keyword_init: true) do
        def held_ns = run_ns + gc_ns
      end

      module_function

      # The pool a thread belongs to: its label without numbers or creation site, so "puma srv tp
      # 001" .. "puma srv tp 005" (or "worker 1", "worker 2") are one pool.
      def pool_key(label) = label.to_s.sub(/\s*\(.*\)\z/, "").gsub(/\d+/, "#")

      # [the pool's rows, its name, the other rows]. +pattern+ (a regexp source, --threads)
      # chooses the pool; by default it is the group of same-named threads that held the GVL longest.
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

        name, pool = rows.group_by { |row| pool_key(row.label) }.max_by { |_name, group| group.sum(&:held_ns) }
        [pool, name, rows - pool]
      end

      # The worker threads' numbers, added together; per request/job when +breakdown+ (entries
      # with count, run_ns, wait_ns, idle_ns, gc_ns) has any.
      def workload(rows, source:, pattern:, held_ratio:, window_ns:, breakdown: nil, notes: [])
        pool, name, others = pick_pool(rows, pattern, source)
        other_held = others.sum(&:held_ns)
        pool_held = pool.sum(&:held_ns)
        entries = Array(breakdown).select { |entry| entry[:count].to_i.positive? }
        sum = ->(key) { entries.sum { |entry| entry[key].to_i } }
        if entries.empty?
          Advisor::Workload.new(source: source, unit: :thread, count: nil, run_ns: pool.sum(&:run_ns),
                                gc_ns: pool.sum(&:gc_ns), wait_ns: pool.sum(&:wait_ns), idle_ns: pool.sum(&:idle_ns),
                                excluded_idle_ns: pool.sum { |row| row.excluded_idle_ns.to_i }, other_held_ns: other_held,
                                pool_held_ns: pool_held, threads: pool.size, pool: name, held_ratio: held_ratio,
                                window_ns: window_ns, notes: notes)
        else
          kinds = entries.map { |entry| entry[:kind].to_s }.uniq
          Advisor::Workload.new(source: source, unit: kinds == ["job"] ? :job : :request, count: sum.(:count),
                                run_ns: sum.(:run_ns), gc_ns: sum.(:gc_ns), wait_ns: sum.(:wait_ns), idle_ns: sum.(:idle_ns),
                                excluded_idle_ns: 0, other_held_ns: other_held, pool_held_ns: pool_held,
                                threads: pool.size, pool: name, held_ratio: held_ratio, window_ns: window_ns, notes: notes)
        end
      end

      # From a trace: the Report's per-thread rows, idle split by reason (a trace knows why a thread
      # was idle; lock/queue/join idle is waiting for work, not the work's IO).
      def from_report(report, threads: nil)
        reasons = report.timeline.threads.transform_values do |thread|
          thread.intervals.each_with_object(Hash.new(0)) do |interval, sums|
            sums[interval.reason] += interval.duration_ns if interval.state == :idle
          end
        end
        rows = report.all_rows.map do |row|
          idle_by = reasons.fetch(row.serial, {})
          excluded = idle_by.sum { |reason, ns| Advisor::WORK_IDLE_REASONS.include?(reason) ? 0 : ns }
          Row.new(label: row.label, run_ns: row.run_ns, gc_ns: row.gc_ns, wait_ns: row.wait_ns,
                  idle_ns: row.idle_ns - excluded, excluded_idle_ns: excluded)
        end
        duration = report.duration_ns
        held = rows.sum(&:held_ns)
        workload(rows, source: "trace #{File.basename(report.file.path.to_s)}", pattern: threads,
                       held_ratio: duration.positive? ? held.fdiv(duration) : 0.0, window_ns: duration)
      end

      # From metrics snapshots as Hashes (the live snapshot's JSON: docs/advise.md): +later+ alone
      # (counts since metrics started) or the interval from +earlier+ to +later+.
      def from_snapshots(later, earlier = nil, source:, threads: nil)
        later = symbolize(later)
        earlier = earlier && symbolize(earlier)
        rows_now = snapshot_rows(later, source)
        if earlier
          before = snapshot_rows(earlier, source).to_h { |serial, row| [serial, row] }
          rows = rows_now.map { |serial, row| [serial, (previous = before[serial]) ? subtract(row, previous) : row] }
          window = later.fetch(:time_ns) - earlier.fetch(:time_ns)
          breakdown = subtract_breakdown(later[:breakdown], earlier[:breakdown])
        else
          rows = rows_now
          window = later[:interval_ns] || rows.map { |_serial, row| row.run_ns + row.gc_ns + row.wait_ns + row.idle_ns }.max
          breakdown = later[:breakdown]
        end
        rows = rows.map(&:last)
        held = rows.sum(&:held_ns)
        held_ratio = window.to_i.positive? ? held.fdiv(window) : later[:held_ratio].to_f
        workload(rows, source: source, pattern: threads, held_ratio: held_ratio, window_ns: window,
                       breakdown: breakdown && breakdown.map { |entry| symbolize(entry) })
      end

      def symbolize(value)
        case value
        when Hash then value.to_h { |key, inner| [key.to_sym, symbolize(inner)] }
        when Array then value.map { |inner| symbolize(inner) }
        else value
        end
      end

      def snapshot_rows(snapshot, source)
        threads = snapshot[:threads]
        raise Error, "#{source}: not a gvlscope snapshot (no \"threads\" list)" unless threads.is_a?(Array)

        threads.filter_map do |thread|
          next if thread[:serial].nil? # exited threads added together: no pool to belong to

          numbers = %i[run_ns wait_ns idle_ns gc_ns].to_h do |key|
            value = thread[key]
            raise Error, "#{source}: thread #{thread[:serial]} has no #{key}" unless value.is_a?(Integer) && value >= 0

            [key, value]
          end
          [thread[:serial], Row.new(label: (thread[:label] || thread[:name]).to_s, excluded_idle_ns: 0, **numbers)]
        end
      end

      def subtract(row, before)
        Row.new(label: row.label, run_ns: row.run_ns - before.run_ns, gc_ns: row.gc_ns - before.gc_ns,
                wait_ns: row.wait_ns - before.wait_ns, idle_ns: row.idle_ns - before.idle_ns, excluded_idle_ns: 0)
      end

      NUMBERS = %i[count run_ns wait_ns idle_ns gc_ns duration_ns].freeze

      def subtract_breakdown(now, before)
        return nil unless now

        earlier = Array(before).to_h { |entry| [[entry[:kind], entry[:label], entry[:tags]], entry] }
        now.map do |entry|
          previous = earlier[[entry[:kind], entry[:label], entry[:tags]]]
          previous ? entry.merge(NUMBERS.to_h { |key| [key, entry[key].to_i - previous[key].to_i] }) : entry
        end
      end
    end
  end
end
