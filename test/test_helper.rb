# frozen_string_literal: true

$LOAD_PATH.unshift File.expand_path("../lib", __dir__)
require "gvlscope"
require "minitest/autorun"
require "open3"
require "rbconfig"
require "etc"
require "gvlscope/model"
require "gvlscope/formats"
require_relative "support/whole_trace"
require_relative "support/gvl_workloads"
require_relative "support/test_times"
require_relative "../lab/ractor_result"

module GVLScopeTestHelper
  ROOT = File.expand_path("..", __dir__)
  # For child programs that wait for a Ractor: `require RACTOR_RESULT`, then RactorResult.of(ractor).
  RACTOR_RESULT = File.join(ROOT, "lab/ractor_result")

  # How much longer than on an idle machine a child may take before it counts as hung: the
  # sanitizer job (libasan preloaded) runs everything several times slower, and other work on
  # the machine (its load average over the cores, read as the child starts) slows it down too.
  def self.hang_limit(seconds)
    sanitized = ENV["LD_PRELOAD"].to_s.include?("libasan") ? 5 : 1
    load = (File.read("/proc/loadavg").to_f rescue 0.0) # rubocop:disable Style/RescueModifier
    (seconds * sanitized * [1.0, load / Etc.nprocessors].max).ceil
  end

  # Runs +command+; returns [stdout, stderr, status]. A process that outlives +timeout+ seconds
  # (on an idle machine: see hang_limit) is killed and the test fails: a hang in CRuby must not
  # hang the suite.
  def run_process(command, env: {}, chdir: Dir.pwd, timeout: 120)
    limit = GVLScopeTestHelper.hang_limit(timeout)
    Open3.popen3(env, *command, chdir: chdir) do |stdin, stdout, stderr, waiter|
      stdin.close
      out_reader = Thread.new { stdout.read }
      err_reader = Thread.new { stderr.read }
      unless waiter.join(limit)
        Process.kill(:KILL, waiter.pid)
        flunk "did not finish in #{limit} s: #{command.join(' ')}"
      end
      [out_reader.value, err_reader.value, waiter.value]
    end
  end

  # Runs Ruby code in a fresh interpreter (this one, with lib on the load path); returns
  # [stdout, stderr, status]. Scenarios that change process-wide state run this way.
  def run_ruby(code, *args, ruby: RbConfig.ruby, env: {}, timeout: 120)
    run_process([ruby, "-I", File.join(ROOT, "lib"), "-e", code, *args], env: env, timeout: timeout)
  end

  # Records a trace of +program+ (Ruby code; GVLWorkloads is loaded) into +path+, in a fresh Ruby.
  def trace_program(path, program)
    _out, err, status = run_ruby(<<~RUBY, path)
      require "gvlscope"
      require #{File.join(ROOT, "test/support/gvl_workloads").inspect}
      GVLScope.trace(ARGV[0]) do
        #{program}
      end
    RUBY
    assert status.success?, err
  end

  # Traces +program+ into DIR/t.gvl and exports it as a user would (`gvlscope export t.gvl
  # --format FORMAT`); returns [the trace, the exported file].
  def trace_and_export(dir, program, format)
    trace = File.join(dir, "t.gvl")
    trace_program(trace, program)
    _out, err, status = gvlscope("export", trace, "--format", format)
    assert status.success?, err
    [trace, File.join(dir, "t#{GVLScope::Formats.fetch(format, command: 'export').extension}")]
  end

  # Runs the gvlscope command in this process (no Ruby to start: for many calls); returns
  # [stdout, stderr, exit status].
  def gvlscope_in_process(*args)
    out = StringIO.new
    err = StringIO.new
    status = GVLScope::CLI.new(out: out, err: err).run(args)
    [out.string, err.string, status]
  end

  # Runs exe/gvlscope; returns [stdout, stderr, status].
  def gvlscope(*args, chdir: ROOT)
    Open3.capture3(RbConfig.ruby, File.join(ROOT, "exe/gvlscope"), *args, chdir: chdir)
  end

  # The states of GVLScope::Vocabulary named +names+. Raises ArgumentError on a name the
  # vocabulary does not have: a check that selects intervals by state must not go on selecting
  # nothing after a state is renamed or removed (assert_consistent once selected :running).
  def self.vocabulary_states(*names)
    unknown = names - GVLScope::Vocabulary::STATES.keys
    raise ArgumentError, "not a state of GVLScope::Vocabulary: #{unknown.map(&:inspect).join(', ')}" unless unknown.empty?

    names
  end

  def vocabulary_states(*names) = GVLScopeTestHelper.vocabulary_states(*names)

  # Invariants of any timeline: every interval is in a state of the vocabulary; within a Ractor
  # at most one thread holds the GVL at a time (Vocabulary::HOLDING: run or gc); a thread only
  # runs after it wanted the GVL (or was holding it already). A timeline with no run at all fails:
  # the holder check would have compared nothing.
  def assert_consistent(timeline)
    holding = vocabulary_states(*GVLScope::Vocabulary::HOLDING)
    run, wait = vocabulary_states(:run, :wait)
    runs = 0
    timeline.ractors.each do |ractor_id, threads|
      unknown = threads.flat_map { |t| t.intervals.map(&:state) }.uniq - GVLScope::Vocabulary::STATES.keys
      assert_empty unknown, "ractor #{ractor_id}: states not in the vocabulary"
      held = threads.flat_map { |t| t.intervals.select { |i| holding.include?(i.state) } }.sort_by(&:start_ns)
      runs += held.count { |i| i.state == run }
      held.each_cons(2) do |a, b|
        next if a.thread == b.thread

        assert_operator b.start_ns, :>=, a.end_ns - 50_000, "ractor #{ractor_id}: #{a.to_a} overlaps #{b.to_a}"
      end
      threads.each do |thread|
        thread.intervals.each_cons(2) do |a, b|
          next unless b.state == run && !holding.include?(a.state)

          assert_equal wait, a.state, "#{thread.label}: running after #{a.state}"
        end
      end
    end
    assert_operator runs, :>, 0, "no interval in state #{run.inspect}: nothing was checked"
  end
end

# A strict parser of the Prometheus text exposition format (0.0.4), enough to prove our output is
# well-formed: every line is a comment, a HELP/TYPE line or `name{labels} value`, label values are
# properly quoted and escaped, every sample belongs to a declared metric family.
class PrometheusText
  Result = Struct.new(:types, :values)
  NAME = /[a-zA-Z_:][a-zA-Z0-9_:]*/
  LABEL = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"/
  VALUE = /[-+]?(?:\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|Inf|NaN)/

  def self.parse(text)
    types = {}
    values = []
    text.each_line(chomp: true).with_index(1) do |line, number|
      next if line.empty?

      if (m = line.match(/\A# TYPE (#{NAME}) (counter|gauge|histogram|summary|untyped)\z/))
        raise ArgumentError, "line #{number}: #{m[1]} typed twice" if types.key?(m[1])

        types[m[1]] = m[2]
      elsif line.start_with?("#")
        next
      elsif (m = line.match(/\A(#{NAME})(?:\{(.*)\})? (#{VALUE})\z/))
        labels = {}
        rest = m[2].to_s
        until rest.empty?
          label = rest.match(/\A#{LABEL}(,|\z)/) or raise ArgumentError, "line #{number}: bad labels #{m[2]}"
          labels[label[1]] = label[2].gsub(/\\(.)/) { $1 == "n" ? "\n" : $1 }
          rest = label.post_match
        end
        family = m[1].sub(/_(bucket|sum|count)\z/, "")
        raise ArgumentError, "line #{number}: #{m[1]} has no TYPE" unless types.key?(m[1]) || types[family] == "histogram"

        values << [m[1], labels, m[3].include?(".") || m[3] =~ /e|Inf|NaN/ ? Float(m[3].sub("Inf", "Infinity")) : Integer(m[3])]
      else
        raise ArgumentError, "line #{number}: not exposition format: #{line.inspect}"
      end
    end
    Result.new(types, values)
  end
end
