# frozen_string_literal: true

require_relative "../support/errors"
require_relative "../support/units"

module GVLScope
  module Analysis
    # `gvlscope diff A B`: what changed in the GVL between two inputs of one kind (two traces, two
    # live snapshot files, two /metrics scrapes), each first made into a Side (DiffInputs): the
    # process's GVL wait and held time, its threads (matched by name and creation site, never by
    # serial: a serial is the order threads were made in, not which thread it is), its routes and
    # jobs (GVLScope::Rack, GVLScope::Sidekiq) and its findings. Formats::DiffText and DiffJSON
    # show it; docs/diff.md states the rules.
    #
    # The rules a verdict follows (RULES, in the JSON too):
    # - a mean (GVL wait per request, per job run) is compared only when each side counted at
    #   least MIN_COUNT requests (job runs): with fewer, one slow request moves the mean more than
    #   the change being looked for;
    # - a rate (GVL wait per second of wall time, of the process or a thread) only when the side
    #   that waited more often waited MIN_COUNT times (the other may have none: that is the change);
    # - a p99 only when each side counted at least MIN_P99 values: with fewer, the 99th percentile
    #   is the largest value, one outlier. The p99 is the upper bound of its power-of-two bucket
    #   (all three inputs keep log2 histograms, not the values), so p99s differ when their buckets do;
    # - a change under SAME_WITHIN (10 %) of A, or held % within SAME_POINTS points, is "about the same".
    class Diff
      MIN_COUNT = 30
      MIN_P99 = 100
      SAME_WITHIN = 0.10
      SAME_POINTS = 2.0
      RULES = { min_count: MIN_COUNT, min_p99: MIN_P99, same_within: SAME_WITHIN, same_points: SAME_POINTS }.freeze
      KINDS = { "trace" => "a trace", "snapshot" => "a live snapshot file", "scrape" => "a /metrics scrape" }.freeze

      # One input made comparable. +kind+: KINDS' key; +wall_ns+: the time it covers (a trace's
      # duration, a snapshot's interval, a scrape's wall time summed over its workers); +waits+: GVL
      # waits counted; +wait_histogram+: log2 counts of them (Log2); +threads+: Group rows; +series+:
      # Series rows; +findings+: FindingRow rows.
      Side = Struct.new(:kind, :path, :wall_ns, :wait_ns, :held_ns, :waits, :wait_histogram, :threads, :series, :findings,
                        keyword_init: true)
      # The threads of one side that share a name and creation site (+threads+ of them).
      Group = Struct.new(:name, :created_at, :threads, :wait_ns, :held_ns, :waits, :wait_histogram, keyword_init: true) do
        def key = [name, created_at]
        def display = "#{name}#{" x#{threads}" if threads > 1}#{" (#{created_at})" if created_at}"
      end
      # A route or job (kind "route" / "job"), its other labels (+tags+), its requests (job runs)
      # and their GVL wait; +wait_histogram+: GVL wait per request, nil where the input has none.
      Series = Struct.new(:kind, :label, :tags, :count, :wait_ns, :duration_ns, :wait_histogram, keyword_init: true) do
        def key = [kind, label, tags]
        def display = tags.empty? ? label : "#{label} (#{tags.map { |k, v| "#{k}=#{v}" }.join(', ')})"
      end
      # A finding: its kind, the threads it is about (the hog, the convoy's waiters: names without
      # serials) and all it involves, its title, and the GVL wait it explains (nil where the input
      # does not say: live findings). Findings match by kind and +about+.
      FindingRow = Struct.new(:kind, :about, :threads, :title, :explains_wait_ns, keyword_init: true) do
        def key = [kind, about.sort]
      end

      # One measure of one thing: A's and B's values (nil: the input has none), the change (+rose+,
      # +fell+, +same+, +not_enough_data+, or nil when there is nothing to compare) and, for
      # not_enough_data, why.
      Measure = Struct.new(:name, :a, :b, :change, :ratio, :why, keyword_init: true)
      # A compared thread, route or job: +status+ "both", "new" (only in B) or "gone" (only in A).
      Item = Struct.new(:kind, :name, :status, :measures, keyword_init: true) do
        def measure(name) = measures.find { |m| m.name == name }
      end

      attr_reader :a, :b

      def initialize(a, b)
        if a.kind != b.kind
          raise Error, "#{a.path} is #{KINDS.fetch(a.kind)} and #{b.path} #{KINDS.fetch(b.kind)}: diff compares two of a kind"
        end

        @a = a
        @b = b
      end

      def kind = a.kind

      # The process: GVL wait per second of wall time, held %, p99 of each GVL wait.
      def process
        @process ||= Item.new(kind: "process", name: "process", status: "both", measures: [
                                rate(:wait_per_s, a.wait_ns, a.wall_ns, a.waits, b.wait_ns, b.wall_ns, b.waits),
                                held(a.held_ns, a.wall_ns, b.held_ns, b.wall_ns),
                                p99(a.wait_histogram, b.wait_histogram),
                              ])
      end

      # Threads matched by name and creation site, A's order then B's new ones.
      # A thread of one side whose name and site match none of the other's is still matched by
      # name alone when that name is left once on each side: the site moved (an edit above the
      # Thread.new) or one input has no sites (an older trace).
      def threads
        @threads ||= by_name_when_unique(matched(a.threads, b.threads)).map do |x, y|
          name = x && y && x.created_at != y.created_at ? moved(x, y) : (x || y).display
          Item.new(kind: "thread", name: name, status: status(x, y), measures: [
                     rate(:wait_per_s, x&.wait_ns, a.wall_ns, x&.waits, y&.wait_ns, b.wall_ns, y&.waits),
                     held(x&.held_ns, a.wall_ns, y&.held_ns, b.wall_ns),
                     p99(x&.wait_histogram, y&.wait_histogram),
                   ])
        end
      end

      # Routes and jobs matched by label and tags: GVL wait per request (job run), its p99.
      def series
        @series ||= matched(a.series, b.series).map do |_, (x, y)|
          Item.new(kind: (x || y).kind, name: (x || y).display, status: status(x, y), measures: [
                     mean(:wait_per_request, x&.wait_ns, x&.count, y&.wait_ns, y&.count),
                     Measure.new(name: :requests, a: x&.count, b: y&.count),
                     p99(x&.wait_histogram, y&.wait_histogram),
                   ])
        end
      end

      def routes = series.select { |item| item.kind == "route" }
      def jobs = series.select { |item| item.kind == "job" }

      # { "new" => [FindingRow of B], "gone" => [of A], "changed" => [[A's, B's]], "same" => [[A's, B's]] }:
      # matched by kind and the threads they are about; changed when the wait each explains per second
      # of its input moved SAME_WITHIN or more.
      def findings
        @findings ||= begin
          result = { "new" => [], "gone" => [], "changed" => [], "same" => [] }
          matched(a.findings, b.findings).each_value do |x, y|
            if x.nil? then result["new"] << y
            elsif y.nil? then result["gone"] << x
            else
              # The wait each explains per second of its input: A and B rarely last as long.
              per_s = ->(finding, side) { finding.explains_wait_ns.fdiv(side.wall_ns) if finding.explains_wait_ns && side.wall_ns.positive? }
              change = compare(per_s.(x, a), per_s.(y, b))
              result[%i[rose fell].include?(change) ? "changed" : "same"] << [x, y]
            end
          end
          result
        end
      end

      # The one-line answer, or why there is none (not enough data).
      def verdict
        @verdict ||= begin
          headline = per_request_verdict("route", "request") || per_request_verdict("job", "job run") || rate_verdict
          held = process.measure(:held)
          parts = [headline]
          parts << "GVL held #{percent(held.a)} → #{percent(held.b)}" if held.a && held.b
          gone = findings["gone"].map(&:kind).uniq
          new = findings["new"].map(&:kind).uniq
          parts << "findings gone: #{gone.join(', ')}" unless gone.empty?
          parts << "new findings: #{new.join(', ')}" unless new.empty?
          parts.join("; ")
        end
      end

      # True when the headline is a verdict, false when the counts allowed none.
      def verdict? = !verdict.start_with?("not enough data")

      SCHEMA_VERSION = 1

      # The diff as plain data (`gvlscope diff --format json`; docs/diff.md): both sides' numbers
      # (what Diff.from_h reads back) and what was made of them.
      def to_h
        {
          "gvlscope_diff" => SCHEMA_VERSION, "kind" => kind, "rules" => RULES.transform_keys(&:to_s),
          "verdict" => verdict, "verdict_given" => verdict?,
          "a" => Diff.side_to_h(a), "b" => Diff.side_to_h(b),
          "process" => item_to_h(process), "threads" => threads.map { |item| item_to_h(item) },
          "routes" => routes.map { |item| item_to_h(item) }, "jobs" => jobs.map { |item| item_to_h(item) },
          "findings" => findings.to_h do |status, rows|
            [status, rows.map { |row| row.is_a?(Array) ? { "a" => row[0].to_h.transform_keys(&:to_s), "b" => row[1].to_h.transform_keys(&:to_s) } : row.to_h.transform_keys(&:to_s) }]
          end
        }
      end

      # The Diff of a to_h (parsed JSON): its sides, compared again.
      def self.from_h(hash)
        unless hash.is_a?(Hash) && hash["gvlscope_diff"] == SCHEMA_VERSION
          raise Error, "not a gvlscope diff (version #{SCHEMA_VERSION})"
        end

        new(side_from_h(hash["a"]), side_from_h(hash["b"]))
      rescue KeyError, TypeError, NoMethodError, ArgumentError => e
        raise Error, "not a gvlscope diff: #{e.message}"
      end

      def self.side_to_h(side)
        {
          "kind" => side.kind, "path" => side.path, "wall_ns" => side.wall_ns, "wait_ns" => side.wait_ns,
          "held_ns" => side.held_ns, "waits" => side.waits, "wait_histogram" => trimmed(side.wait_histogram),
          "threads" => side.threads.map { |g| g.to_h.transform_keys(&:to_s).merge("wait_histogram" => trimmed(g.wait_histogram)) },
          "series" => side.series.map { |s| s.to_h.transform_keys(&:to_s).merge("wait_histogram" => trimmed(s.wait_histogram)) },
          "findings" => side.findings.map { |f| f.to_h.transform_keys(&:to_s) }
        }
      end

      def self.side_from_h(hash)
        symbols = ->(row) { row.to_h { |key, value| [key.to_sym, value] } }
        Side.new(
          kind: hash.fetch("kind"), path: hash.fetch("path"), wall_ns: hash.fetch("wall_ns"), wait_ns: hash["wait_ns"],
          held_ns: hash["held_ns"], waits: hash["waits"], wait_histogram: padded(hash["wait_histogram"]),
          threads: hash.fetch("threads").map { |row| Group.new(**symbols.(row), wait_histogram: padded(row["wait_histogram"])) },
          series: hash.fetch("series").map { |row| Series.new(**symbols.(row), wait_histogram: padded(row["wait_histogram"])) },
          findings: hash.fetch("findings").map { |row| FindingRow.new(**symbols.(row)) }
        )
      end

      def self.trimmed(counts) = counts&.first((counts.rindex(&:positive?) || -1) + 1)
      def self.padded(counts) = counts && Array.new(Log2::BUCKETS) { |i| Integer(counts.fetch(i, 0)) }

      private

      # { key => [A's row or nil, B's row or nil] }, A's order first.
      def matched(xs, ys)
        pairs = {}
        xs.each { |x| (pairs[x.key] ||= [nil, nil])[0] = x }
        ys.each { |y| (pairs[y.key] ||= [nil, nil])[1] = y }
        pairs
      end

      def item_to_h(item)
        { "kind" => item.kind, "name" => item.name, "status" => item.status,
          "measures" => item.measures.to_h do |m|
            [m.name.to_s, { "a" => m.a, "b" => m.b, "change" => m.change&.to_s, "ratio" => m.ratio, "why" => m.why }.compact]
          end }
      end

      # The pairs of +pairs+ (matched), with a lone A row and a lone B row of one name made one.
      def by_name_when_unique(pairs)
        lone = ->(side) { pairs.values.map { |pair| pair[side] }.select.with_index { |row, i| row && pairs.values[i][1 - side].nil? } }
        left = lone.(0).group_by(&:name)
        right = lone.(1).group_by(&:name)
        joined = left.select { |name, rows| rows.size == 1 && right[name]&.size == 1 }.to_h { |name, (row)| [row, right[name].first] }
        taken = joined.values
        pairs.values.filter_map do |x, y|
          next if x.nil? && taken.include?(y)

          x && y.nil? && joined[x] ? [x, joined[x]] : [x, y]
        end
      end

      def moved(x, y)
        count = x.threads == y.threads ? " x#{x.threads}" : " x#{x.threads} → #{y.threads}" if [x.threads, y.threads].max > 1
        "#{x.name}#{count} (#{x.created_at || '?'} → #{y.created_at || '?'})"
      end

      def status(x, y) = if x.nil? then "new" elsif y.nil? then "gone" else "both" end

      # :rose, :fell or :same, from A to B (SAME_WITHIN of A); nil when one is missing.
      def compare(x, y)
        return nil if x.nil? || y.nil?
        return y.positive? ? :rose : :same if x.zero?

        change = (y - x).fdiv(x)
        if change.abs < SAME_WITHIN then :same
        else change.positive? ? :rose : :fell
        end
      end

      def ratio(x, y) = x&.positive? && y ? (y - x).fdiv(x) : nil

      # ns of GVL wait per second of wall time.
      def rate(name, x_ns, x_wall, x_waits, y_ns, y_wall, y_waits)
        x = x_ns && x_wall.positive? ? x_ns * 1e9 / x_wall : nil
        y = y_ns && y_wall.positive? ? y_ns * 1e9 / y_wall : nil
        return Measure.new(name: name, a: x, b: y) if x.nil? || y.nil?

        waits = [x_waits.to_i, y_waits.to_i].max
        if waits < MIN_COUNT
          return Measure.new(name: name, a: x, b: y, change: :not_enough_data,
                             why: "#{x_waits.to_i} and #{y_waits.to_i} waits (a verdict needs #{MIN_COUNT} on one side)")
        end

        Measure.new(name: name, a: x, b: y, change: compare(x, y), ratio: ratio(x, y))
      end

      # ns of GVL wait per request (job run).
      def mean(name, x_ns, x_count, y_ns, y_count)
        x = x_count&.positive? ? x_ns.fdiv(x_count) : nil
        y = y_count&.positive? ? y_ns.fdiv(y_count) : nil
        return Measure.new(name: name, a: x, b: y) if x_count.nil? || y_count.nil?

        if [x_count, y_count].min < MIN_COUNT
          return Measure.new(name: name, a: x, b: y, change: :not_enough_data,
                             why: "#{x_count} and #{y_count} counted (a verdict needs #{MIN_COUNT} on each side)")
        end

        Measure.new(name: name, a: x, b: y, change: compare(x, y), ratio: ratio(x, y))
      end

      # The share of the wall time held (0..1 per Ractor); same within SAME_POINTS points.
      def held(x_ns, x_wall, y_ns, y_wall)
        x = x_ns && x_wall.positive? ? x_ns.fdiv(x_wall) : nil
        y = y_ns && y_wall.positive? ? y_ns.fdiv(y_wall) : nil
        return Measure.new(name: :held, a: x, b: y) if x.nil? || y.nil?

        points = 100 * (y - x)
        change = if points.abs < SAME_POINTS then :same
                 else points.positive? ? :rose : :fell
                 end
        Measure.new(name: :held, a: x, b: y, change: change, ratio: points / 100)
      end

      # The upper bound (ns) of the bucket of the 99th percentile of each histogram.
      def p99(x_counts, y_counts)
        x = x_counts && quantile_bound(x_counts)
        y = y_counts && quantile_bound(y_counts)
        return Measure.new(name: :p99_wait, a: x, b: y) if x_counts.nil? || y_counts.nil?

        counts = [x_counts.sum, y_counts.sum]
        if counts.min < MIN_P99
          return Measure.new(name: :p99_wait, a: x, b: y, change: :not_enough_data,
                             why: "#{counts[0]} and #{counts[1]} values (a p99 needs #{MIN_P99} on each side)")
        end

        change = if x == y then :same
                 else y > x ? :rose : :fell
                 end
        Measure.new(name: :p99_wait, a: x, b: y, change: change, ratio: ratio(x, y))
      end

      def quantile_bound(counts)
        bucket = Log2.quantile_bucket(counts, 0.99)
        bucket && Log2.upper(bucket) + (bucket.zero? ? 0 : 1)
      end

      def per_request_verdict(kind, one)
        sides = [a, b].map { |side| side.series.select { |s| s.kind == kind } }
        return nil if sides.any?(&:empty?)

        measure = mean(:wait_per_request, *sides.flat_map { |s| [s.sum(&:wait_ns), s.sum(&:count)] })
        counts = sides.map { |s| s.sum(&:count) }
        phrase(measure, "GVL wait per #{one}", ->(ns) { Units.ms_or_us(ns.round) },
               "#{Diff.count(counts[0])} → #{Diff.count(counts[1])} #{one}s")
      end

      def rate_verdict
        measure = process.measure(:wait_per_s)
        phrase(measure, "GVL wait per second", ->(ns) { "#{Diff.ms_per_s(ns)}/s" },
               "#{Diff.count(a.waits)} → #{Diff.count(b.waits)} waits")
      end

      def phrase(measure, what, shown, counted)
        values = "A #{measure.a ? shown.(measure.a) : 'none'} → B #{measure.b ? shown.(measure.b) : 'none'}"
        case measure.change
        when :rose, :fell
          "#{what} #{measure.change} #{Diff.percent_change(measure.ratio)} (#{values}; #{counted})"
        when :same then "#{what} about the same (#{values}; #{counted})"
        when :not_enough_data then "not enough data for a verdict on #{what}: #{measure.why} (#{values})"
        else "not enough data for a verdict on #{what} (#{values})"
        end
      end

      def percent(ratio) = Diff.percent(ratio)

      class << self
        # "62 %" of a relative change (-0.62); "x3.1" when it more than doubled.
        def percent_change(ratio)
          return "from none" if ratio.nil?
          return format("x%.1f", 1 + ratio) if ratio >= 1

          percent = 100 * ratio.abs
          # "fell 100 %" is for all of it: 99.8 % stays 99.8 %, 99.99 % is ">99.9 %".
          return ">99.9 %" if percent >= 99.95 && ratio > -1
          return format("%.1f %%", percent) if percent >= 99.5 && ratio > -1

          format("%.0f %%", percent)
        end

        def percent(ratio) = format("%.1f %%", 100 * ratio)
        def ms_per_s(ns) = ns >= 10_000_000 ? format("%.0f ms", ns / 1e6) : format("%.2f ms", ns / 1e6)
        def count(n) = n.to_i.to_s.gsub(/\B(?=(\d{3})+\z)/, ",")
      end
    end
  end
end
