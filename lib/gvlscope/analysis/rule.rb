# frozen_string_literal: true

require_relative "../support/units"
require_relative "../support/vocabulary"
require_relative "blame"
require_relative "code_locations"
require_relative "finding"

module GVLScope
  module Analysis
    # A kind of finding, declared once next to its rule (Rule.kind) and read by every output that
    # names kinds (Analysis::KINDS): +name+ is Finding#kind (JSON, diff), +title+ its words in
    # prose ("long hold"), +legend+ what it means in one line, and +holder+ whose code the HTML
    # report shows for it: :about (the thread it is about), :main_holder (the convoy's main
    # holder) or nil (everyone's).
    FindingKind = Struct.new(:name, :title, :legend, :holder, keyword_init: true)

    # What every finding rule shares. A rule asks for repeated, large effects (several events,
    # each a good part of a timeslice) so that a healthy program gets no finding: none is better
    # than a false one (tests check both ways). A rule is built with the Report and answers
    # #findings, an Array of Finding: one per cause, so threads that share a cause share a finding.
    class Rule
      # A thread is CPU-bound when the scheduler, not a blocking call, ended most of its holds.
      MIN_PREEMPTIONS = 2
      PREEMPTED_SHARE = 0.5

      # The kinds of finding this rule makes, in the order declared (Rule.kind).
      def self.kinds = @kinds ||= []

      # Declares a kind this rule makes; #finding takes no other.
      def self.kind(name, title:, legend:, holder: nil)
        kinds << FindingKind.new(name: name, title: title, legend: legend, holder: holder).freeze
      end

      def initialize(report)
        @report = report
        @timeline = report.timeline
        @timeslice_ns = report.timeslice_ns
        # Per-thread totals, already summed (ThreadStats::Row): rules read these, the blame and the
        # report's other summaries, never intervals (a streaming engine keeps none).
        @rows = report.all_rows.to_h { |row| [row.serial, row] }
        @labels = @rows.transform_values(&:label)
        # All GVL wait in the trace, every thread: what a finding's wait_share is a share of.
        @all_wait_ns = @rows.each_value.sum(&:wait_ns)
      end

      private

      # A Finding about the threads +about+ (Rows) with the +others+ involved (labels), explaining
      # +explains_wait_ns+ of the trace's GVL wait.
      def finding(kind:, about:, others: [], explains_wait_ns:, **fields)
        # An undeclared kind would be missing from every output that lists kinds.
        declared = self.class.kinds.any? { |declared_kind| declared_kind.name == kind }
        raise ArgumentError, "#{self.class} declares no finding kind #{kind.inspect}" unless declared

        about = about.map(&:label)
        Finding.new(kind: kind, about: about, threads: (about + others).uniq, explains_wait_ns: explains_wait_ns,
                    wait_share: if fields[:loop_wait] then nil
                                elsif @all_wait_ns.positive? then (explains_wait_ns.to_f / @all_wait_ns).round(4)
                                else 0.0
                                end,
                    **fields)
      end

      # The scheduler ended most of its holds at the end of a timeslice: it runs Ruby code without
      # blocking (Vocabulary::RELEASE_CAUSES; an exit is no release).
      def cpu_bound?(row)
        released = row.released_by
        preempted = released[:preempted]
        preempted >= MIN_PREEMPTIONS && preempted >= PREEMPTED_SHARE * releases(row)
      end

      def releases(row) = row.released_by.sum { |cause, count| cause == :exit ? 0 : count }

      # A CPU-bound thread others waited a timeslice or more for: Rules::Hog's finding. Unless it
      # is a worker (#worker?) that held the GVL mostly in long hold streaks (ThreadStats::Row)
      # that ended in a pause: it ran requests or jobs one after another, waiting for work between
      # them, and Rules::LongHold names them.
      def hog?(row)
        cpu_bound?(row) && @report.blame.waited_on(row.serial) >= @timeslice_ns && !units_of_work?(row)
      end

      def units_of_work?(row) = worker?(row) && 2 * row.long_streak_held_ns >= row.held_ns

      # A thread that runs requests or jobs: a trace knows no request, but servers run them on
      # named, numbered threads of a pool (Puma's "puma srv tp 001", Sidekiq's "processor #7",
      # "worker-3") or on several threads of one name. Never the main thread: it boots the app
      # (Puma requiring gems) or runs the script, and its long stretch is a hog or a convoy's cause.
      def worker?(row)
        info = @timeline.threads[row.serial]&.info
        name = info&.name.to_s
        return false if info.nil? || info.main || name.empty?

        row.label.b.match?(/\d/) || names.fetch(name, 0) > 1
      end

      # How many threads carry each name (nil: unnamed).
      def names = @names ||= @rows.each_key.map { |serial| @timeline.threads[serial]&.info&.name }.tally

      # The ns +serial+ waited for the GVL while nobody held it (Blame::HAND_OFF).
      def hand_off_ns(serial) = @report.blame.all_waits.fetch(serial, nil)&.fetch(Blame::HAND_OFF, 0) || 0

      # +serials+ in groups joined when one waited for another (+waited+: waiter -> {holder -> ns})
      # at least +at_least_ns+: threads so connected share a cause. Groups keep +serials+' order.
      def connected(serials, waited, at_least_ns)
        linked = ->(waiter, holder) { waited.fetch(waiter, nil)&.fetch(holder, 0).to_i >= at_least_ns }
        left = serials.dup
        groups = []
        until left.empty?
          group = [left.shift]
          group.each do |member| # visits the members it appends too
            joined, left = left.partition { |other| linked.call(member, other) || linked.call(other, member) }
            group.concat(joined)
          end
          groups << (serials & group)
        end
        groups
      end

      # { holder label (or Blame::HAND_OFF) => share of the wait time }, largest first.
      def shares(holders)
        total = holders.values.sum.to_f
        return {} unless total.positive?

        holders.sort_by { |_, ns| -ns }.to_h do |serial, ns|
          [serial == Blame::HAND_OFF ? Blame::HAND_OFF : @labels.fetch(serial) { Vocabulary.thread_label(nil, serial) }, (ns / total).round(4)]
        end
      end

      def describe_shares(holders)
        shown = holders.first(3).select { |_, share| share >= 0.01 }
        shown.map do |holder, share|
          "#{holder == Blame::HAND_OFF ? 'nobody (hand-off)' : quote(holder)} #{(100 * share).round}%"
        end.join(", ")
      end

      # How many threads a fix suggests: `gvlscope advise`'s answer on the same trace (Report#advice),
      # or in the same words why this fix differs from it.
      def thread_count_fix
        advice = @report.advice
        return "use fewer threads per process (`gvlscope advise` gives no count for this trace: #{advice})" if advice.is_a?(String)

        pool = "the pool #{quote(advice.workload.pool)} has #{advice.current_threads}"
        if advice.threads < advice.current_threads
          format("use %d threads per process (%s; `gvlscope advise` on this trace: the fewest that keep the GVL %d%% busy)",
                 advice.threads, pool, (100 * advice.target).round)
        else
          format("use fewer threads per process only to cut this wait: `gvlscope advise` on this trace says %d (%s), " \
                 "as fewer would lose throughput", advice.threads, pool)
        end
      end

      # "'a' 120 ms, 'b' 80 ms, 'c' 3 ms": the three that waited the most of +victims+ ({ serial => ns }).
      def top_victims(victims)
        victims.sort_by { |_, ns| -ns }.first(3).map { |serial, ns| "#{quote(@labels[serial])} #{ms(ns)}" }.join(", ")
      end

      # "'a', 'b', 'c' and 2 more" of +labels+ (`gvlscope top`'s findings name threads so too).
      def self.list(labels, shown: 3)
        quoted = labels.first(shown).map { |label| "'#{label}'" }
        labels.size > shown ? "#{quoted.join(', ')} and #{labels.size - shown} more" : quoted.join(", ")
      end

      def list(labels, shown: 3) = Rule.list(labels, shown: shown)

      # "The holder was in `Counter#spin` (lib/counter.rb:8) 97% of the time" from the holder
      # samples of +rows+ (CodeLocations rows); nil without samples.
      def holder_code(rows, subject)
        top = rows.first or return nil
        format("%s in %s %d%% of the time", subject, top.name, (100 * top.share).round)
      end

      # Sentences that name code, appended to a finding's title: "" when there are none.
      def code_sentences(*sentences)
        sentences.compact.map { |sentence| ". #{sentence}" }.join
      end

      # "Their top release sites: `IO#read` at app.rb:12 (2104 ms of waiting after 21), ..." (the
      # waits that followed them); nil without sites.
      def describe_sites(sites, whose: "Its")
        shown = sites.first(3).select { |row| row.weight.positive? }
        return if shown.empty?

        "#{whose} top release sites: #{shown.map { |row| "#{row.name} (#{ms(row.weight)} of waiting after #{row.count})" }.join(', ')}"
      end

      # CodeLocations rows of several threads as one profile: rows naming the same code add up.
      def merged_profile(profiles)
        return profiles.first || [] if profiles.size <= 1

        merged = profiles.flatten.group_by { |row| [row.frame.label, row.frame.path] }.map do |_, rows|
          heaviest = rows.max_by(&:weight)
          CodeLocations::Row.new(frame: heaviest.frame, weight: rows.sum(&:weight), count: rows.sum { |row| row.count.to_i })
        end
        total = merged.sum(&:weight).to_f
        merged.each { |row| row.share = total.positive? ? row.weight / total : 0.0 }.sort_by { |row| -row.weight }
      end

      # { holder_frames: [...], release_sites: [...] } for a finding's evidence (empty without stacks).
      def code_evidence(holders, sites)
        return {} unless @timeline.stacks?

        { holder_frames: holders.first(5).map(&:to_h), release_sites: sites.first(5).map(&:to_h) }
      end

      def percent(ns) = @report.duration_ns.positive? ? (100.0 * ns / @report.duration_ns).round : 0
      def quote(label) = "'#{label}'"
      def ms(ns) = Units.ms_rounded(ns)
    end
  end
end
