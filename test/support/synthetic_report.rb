# frozen_string_literal: true

require "delegate"
require "gvlscope/model"
require "gvlscope/analysis"

# A report of a trace too big to record in a test: an Analysis::Report of a small fixture whose
# Report API answers (rows, findings, overview, detail, events) are made up at the size of a
# 100M-event trace of thousands of threads, every overview bin busy and every window around a
# finding fuller of intervals than the HTML report takes. It is what the HTML report's size
# budget is checked on (test/formats/report_html_test.rb) and timed on (bench/report_html.rb).
class SyntheticReport < GVLScope::Analysis::Report
  FIXTURE = File.expand_path("../fixtures/traces/mixed.gvl", __dir__)
  # Each busy thread changes state every 8 us: 500,000 intervals in 5 ms, ten times what the page
  # takes around a finding (its share of the budget spans 4 ms).
  INTERVAL_NS = 8_000
  STATES = %i[run wait idle].freeze
  DETAIL_THREADS = 100

  # The made-up trace's file: the fixture's, with the event count of the trace it stands for.
  class File < SimpleDelegator
    def initialize(file, events)
      super(file)
      @events = events
    end

    def size = @events
    def path = "synthetic-#{@events}-events.gvl"
  end

  # Bins made when asked for (2,000 threads' lanes at once would take 128 MB): one pattern of
  # run 0-49 %, wait 0-39 %, gc 1 % and idle the rest, shifted by a few bins for each thread.
  class Overview < GVLScope::Analysis::Overview
    def lane(serial)
      @pattern ||= Array.new(bins) do |bin|
        run = bin_ns * (bin * 7 % 50) / 100
        wait = bin_ns * (bin * 3 % 40) / 100
        [run, wait, bin_ns - run - wait - bin_ns / 100, bin_ns / 100]
      end.flatten
      @pattern.rotate(4 * serial)
    end
  end

  attr_reader :duration_ns

  def initialize(threads: 2_000, duration_ns: 600 * 1_000_000_000, events: 100_000_000, findings: 30)
    super(GVLScope::Model.timeline(FIXTURE))
    @duration_ns = duration_ns
    @events = events
    @all_rows = (1..threads).map do |serial|
      GVLScope::Analysis::ThreadStats::Row.new(
        serial: serial, label: "worker #{serial}", created_at: "app/worker.rb:#{serial}", ractor_id: 0,
        # The first threads ran and waited most: the HTML report gives them their own lanes.
        run_ns: duration_ns / threads * 2 * (threads - serial) / threads, wait_ns: duration_ns / 4 * (threads - serial) / threads,
        idle_ns: duration_ns / 2, gc_ns: duration_ns / threads / 100, holds: 50_000, waits: 50_000,
        longest_wait_ns: 2_000_000, released_by: { io: 40_000, preempted: 10_000 }
      )
    end
    # Findings spread over the trace, each about a thread and two others, focused on 1 ms.
    @made_findings = (0...findings).map do |index|
      at = duration_ns / (findings + 1) * (index + 1)
      threads_named = [1 + (index * 67) % threads, 1 + (index * 67 + 1) % threads, 1 + (index * 67 + 2) % threads]
      GVLScope::Analysis::Finding.new(
        kind: :convoy, threads: threads_named.map { |serial| "worker #{serial}" },
        title: "Convoy #{index + 1}: 'worker #{threads_named.first}' waited for the GVL after its blocking calls",
        evidence: {}, fix: "move the CPU-bound work elsewhere", focus_ns: [at, at + 1_000_000]
      )
    end
  end

  def file = File.new(super, @events)
  def all_rows = @all_rows
  def rows = @all_rows
  def findings = @made_findings

  def overview(bins: GVLScope::Analysis::Overview::BINS)
    @overviews ||= {}
    @overviews[bins] ||= Overview.new(@duration_ns, bins: bins)
  end

  # The busiest DETAIL_THREADS threads (all have lanes), one interval each per INTERVAL_NS from
  # +start_ns+ on, in time order: far more than +limit+ in any window of a millisecond.
  def detail(start_ns, end_ns, limit: 200_000)
    threads = [DETAIL_THREADS, @all_rows.size].min
    steps = (end_ns - start_ns + INTERVAL_NS - 1) / INTERVAL_NS
    Array.new([limit, steps * threads].min) do |index|
      step, thread = index.divmod(threads)
      from = start_ns + step * INTERVAL_NS
      state = STATES[(step + thread) % STATES.size]
      GVLScope::Model::Interval.new(thread + 1, state, from, from + INTERVAL_NS, state == :idle ? :io : :preempted)
    end
  end

  # #detail of each window, one by one.
  def details(windows, limit: 200_000) = windows.map { |start_ns, end_ns, own| detail(start_ns, end_ns, limit: own || limit) }
  def details_columns(windows, limit: 200_000) = details(windows, limit: limit).map { |found| GVLScope::Model::IntervalColumns.of(found) }
end
