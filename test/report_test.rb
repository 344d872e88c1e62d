# frozen_string_literal: true

require "test_helper"
require "tmpdir"
require "json"
require "gvlscope/analysis"
require "gvlscope/formats/report_text"
require "gvlscope/formats/report_json"

# Findings on scripted programs: each problem is found and blamed on the right thread, and
# healthy programs get no finding at all.
class ReportTest < Minitest::Test
  include GVLScopeTestHelper

  # Traces +program+ in a fresh Ruby and returns its Report.
  def report_of(program)
    Dir.mktmpdir("gvlscope-report") do |dir|
      path = File.join(dir, "t.gvl")
      trace_program(path, program)
      timeline = GVLScope::Model.timeline(path)
      assert_consistent(timeline)
      GVLScope::Analysis::Report.new(timeline)
    end
  end

  def test_convoy_is_found_and_blames_the_cpu_thread
    report = report_of(<<~RUBY)
      cpu = GVLWorkloads.cpu_thread("cpu", 60)
      GVLWorkloads.echo_round_trips(6)
      cpu.kill.join
    RUBY
    convoy = report.findings.find { |f| f.kind == :convoy && f.thread == "echo" }
    assert convoy, report.findings.map(&:title).inspect
    # Each of echo's reads returns while cpu holds the GVL: cpu held it for most of echo's wait.
    assert_operator convoy.evidence[:holders].fetch("cpu"), :>=, 0.9
    assert_operator convoy.evidence[:slow_waits], :>=, 5
    assert_operator convoy.evidence[:median_wait_ns], :>=, report.timeslice_ns / 4
    assert_match(/move that CPU-bound work/, convoy.fix)
    refute(report.findings.any? { |f| f.kind == :convoy && f.thread == "cpu" })
  end

  # Two printers pop from a queue and write each item (a blocking call) under a lock.
  def producer_consumer(queue, producer)
    <<~RUBY
      queue = #{queue}
      out = File.open(File::NULL, "w")
      out.sync = true
      lock = Mutex.new
      printers = 2.times.map do |n|
        Thread.new do
          Thread.current.name = "printer \#{n}"
          while (item = queue.pop)
            lock.synchronize { out.write("printer \#{n}: \#{item}\\n") }
          end
        end
      end
      producer = Thread.new do
        Thread.current.name = "producer"
        #{producer}
        queue.close
      end
      producer.join
      printers.each(&:join)
    RUBY
  end

  def test_a_producer_with_an_unbounded_queue_is_a_hog
    report = report_of(producer_consumer("Queue.new", <<~RUBY))
      deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 1.0
      i = 0
      queue.push(i += 1) while Process.clock_gettime(Process::CLOCK_MONOTONIC) < deadline
      queue.clear # millions of items the printers would need hours for
    RUBY
    hog = report.findings.find { |f| f.kind == :hog }
    assert hog, report.findings.map(&:title).inspect
    assert_equal "producer", hog.thread
    assert_operator hog.evidence[:preempted], :>=, 2
    assert_operator hog.evidence[:others_waited_ns], :>=, report.timeslice_ns
    assert_match(/SizedQueue/, hog.fix)
  end

  def test_a_producer_with_a_sized_queue_is_not
    report = report_of(producer_consumer("SizedQueue.new(100)", "20_000.times { |i| queue.push(i) }"))
    assert_empty report.findings.select { |f| f.kind == :hog }, report.findings.map(&:title).inspect
  end

  def test_sleeping_threads_have_no_finding
    report = report_of(<<~RUBY)
      4.times.map { |n| Thread.new { 5.times { sleep 0.02 } } }.each(&:join)
    RUBY
    assert_empty report.findings, report.findings.map(&:title).inspect
    assert_match(/^No findings/, GVLScope::Formats::ReportText.new(report).to_s)
  end

  def test_a_single_thread_has_no_finding
    report = report_of("x = 0; 3_000_000.times { x += 1 }; GC.start; File.read(File::NULL)")
    assert_empty report.findings
  end

  # Counters that run for a time, not to a number: on a fast machine 8M increments took 2
  # timeslices per thread, fewer acquisitions than the finding needs (20).
  def counters_for(threads, seconds)
    "#{threads}.times.map { |n| GVLWorkloads.cpu_thread(\"counter \#{n}\", #{seconds}) }.each(&:join)"
  end

  def test_contention_needs_many_threads_waiting_at_once
    two = report_of(counters_for(2, 1.5))
    assert_empty two.findings.select { |f| f.kind == :contention }
    six = report_of(counters_for(6, 3))
    contention = six.findings.find { |f| f.kind == :contention }
    assert contention, six.findings.map(&:title).inspect
    assert_operator contention.evidence[:most_waiters], :>=, 4
  end

  def test_histograms_count_every_hold_and_wait
    report = report_of(<<~RUBY)
      r, w = IO.pipe
      t = Thread.new { 5.times { r.read(1) } }
      5.times { w.write("x"); sleep 0.005 }
      t.join
    RUBY
    histograms = report.histograms
    assert_equal report.rows.sum(&:waits), histograms[:wait_ns].sum
    assert_equal report.rows.sum(&:holds), histograms[:hold_ns].sum
    assert_equal histograms[:wait_ns].sum, histograms[:waiters_at_acquire].sum
  end

  def test_json_has_the_documented_fields_and_adds_up
    report = report_of("Thread.new { sleep 0.01 }.join")
    data = JSON.parse(GVLScope::Formats::ReportJSON.new(report).to_s)
    assert_equal 2, data["gvlscope_report"]
    assert_equal %w[dropped_events duration_ns events file findings gvlscope_report histograms pid ractors stacks threads
                    timeslice_ns truncated wait_ns], data.keys.sort
    assert_equal %w[dropped holders recorded release_sites samples sites unreadable], data["stacks"].keys.sort
    assert_equal data["threads"].sum { |t| t["wait_ns"] }, data["wait_ns"]
    thread = data["threads"].find { |t| t["name"] != "main" } # created during the trace: its creation site is known
    assert_equal %w[created_at gc_ns holds idle_ns longest_wait_ns name ractor_id released_by run_ns serial wait_ns waits],
                 thread.keys.sort
    assert_match(/\A.+:\d+\z/, thread["created_at"])
    assert_equal %w[hold_ns wait_ns waiters_at_acquire], data["histograms"].keys.sort
    bucket = data["histograms"]["hold_ns"].first
    assert_equal %w[count from to], bucket.keys.sort
  end
end
