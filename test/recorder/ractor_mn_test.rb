# frozen_string_literal: true

require "test_helper"
require "gvlscope/model"
require "tmpdir"
require "json"
require "gvlscope/formats/chrome_json"

# Ractors run their hooks concurrently, and M:N moves Ruby threads between native threads: both
# must give complete, consistent per-thread sequences. Run in child processes (Ractor warnings,
# RUBY_MN_THREADS is read at boot).
class RactorMNTest < Minitest::Test
  include GVLScopeTestHelper

  def trace_in_child(code, env: {})
    Dir.mktmpdir("gvlscope-ractor") do |dir|
      path = File.join(dir, "t.gvl")
      _out, err, status = run_ruby(<<~RUBY, env: env)
        require "gvlscope"
        require #{RACTOR_RESULT.inspect}
        Warning[:experimental] = false
        summary = GVLScope.trace(#{path.inspect}) { #{code} }
        abort "dropped \#{summary.dropped}" unless summary.dropped.zero?
      RUBY
      assert status.success?, err
      yield GVLScope::Model.timeline(path)
    end
  end

  # Thread.pass and CPU work, not sleep or IO: with sleep (3.3.8) or pipe IO (3.4.5) in threads of
  # non-main Ractors, CRuby itself hangs now and then, traced or not (seen here: every native
  # thread idle, Ractor#take never returns). Thread.pass still makes the threads of each Ractor
  # hand their GVL over (SUSPENDED/READY/RESUMED) while the Ractors run in parallel.
  def test_four_ractors_of_four_threads
    code = <<~RUBY
      4.times.map do |r|
        Ractor.new(r) do |n|
          4.times.map { Thread.new { 20.times { Thread.pass; 30_000.times.sum } } }.each(&:join)
          n
        end
      end.map { |ractor| RactorResult.of(ractor) }
    RUBY
    trace_in_child(code) do |timeline|
      assert_consistent(timeline)
      by_ractor = timeline.ractors
      assert_operator by_ractor.keys.count { |id| id > 1 }, :>=, 4, "ractor ids: #{by_ractor.keys}"
      workers = by_ractor.reject { |id, _| id <= 1 }.values.map { |threads| threads.count { |t| t.intervals.any? { |i| i.state == :exited } } }
      assert workers.all? { |n| n >= 4 }, "threads that ran and died per Ractor: #{workers}"
    end
  end

  def test_mn_threads_show_native_lanes
    code = "8.times.map { |n| Thread.new { 5.times { sleep 0.001 } } }.each(&:join)"
    trace_in_child(code, env: { "RUBY_MN_THREADS" => "1" }) do |timeline|
      assert_consistent(timeline)
      assert_equal 9, timeline.threads.size
      # Slices begun by RESUMED (after wanting the GVL). The tracing thread was already running
      # before its first event: on which native thread is not recorded until it resumes.
      running = timeline.threads.values.flat_map do |t|
        t.intervals.each_cons(2).select { |before, i| i.state == :run && before.state == :wait }.map(&:last)
      end
      refute_empty running
      assert running.all?(&:native), "every running slice knows its native thread"
      lanes = timeline.file.native_tids
      refute_empty lanes
      # Under M:N a few native threads serve the 8 Ruby threads, and exports show them.
      assert_operator lanes.size, :<=, timeline.threads.size + 2
      assert timeline.shared_native_threads?
      json = JSON.parse(GVLScope::Formats::ChromeJSON.new(timeline).write(+""))
      assert(json["traceEvents"].any? { |e| e["cat"] == "native" })
    end
  end
end
