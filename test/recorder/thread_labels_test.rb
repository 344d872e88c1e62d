# frozen_string_literal: true

require "test_helper"
require "json"
require "tmpdir"
require "fileutils"

# A thread's label is the same short, distinct handle everywhere: an unnamed thread made inside a
# gem by the gem's own path ("fakepool-1.2.3/lib/fakepool.rb:5", not a cut absolute path), and
# threads that share a name told apart by their serial ("processor #7"), in the summary, the
# report, the exports, --thread and the live metrics `top` reads.
class ThreadLabelsTest < Minitest::Test
  include GVLScopeTestHelper

  GEM_POOL = <<~RUBY
    module FakePool
      def self.start(count, name = nil)
        Array.new(count) do
          Thread.new do
            Thread.current.name = name if name
            20.times { sleep 0.001 }
          end
        end.each(&:join)
      end
    end
  RUBY

  def with_gem_trace
    Dir.mktmpdir("gvlscope-labels") do |dir|
      # A long install path, as a real one is: the old labels cut it at 48 characters.
      lib = File.join(dir, "home", "someone", ".gem", "ruby", "3.3.0", "gems", "fakepool-1.2.3", "lib")
      FileUtils.mkdir_p(lib)
      File.write(File.join(lib, "fakepool.rb"), GEM_POOL)
      trace = File.join(dir, "t.gvl")
      trace_program(trace, "require #{File.join(lib, 'fakepool').inspect}; FakePool.start(2); FakePool.start(3, 'processor')")
      yield dir, trace
    end
  end

  def test_unnamed_gem_threads_show_the_gem_path_and_namesakes_are_told_apart
    with_gem_trace do |dir, trace|
      out, err, status = gvlscope("summary", trace, chdir: dir)
      assert status.success?, err
      unnamed = out.scan(/^thread \d+ \(fakepool-1\.2\.3\/lib\/fakepool\.rb:4\)/)
      assert_equal 2, unnamed.uniq.size, out
      refute_includes out.lines.drop(1).join, dir, "no absolute path of the install"
      processors = out.scan(/^processor #\d+ \(fakepool-1\.2\.3\/lib\/fakepool\.rb:4\)/)
      assert_equal 3, processors.uniq.size, out

      json, err, status = gvlscope("report", trace, "--json", chdir: dir)
      assert status.success?, err
      names = JSON.parse(json)["threads"].map { |thread| thread["name"] }
      labels = names.grep(/\Aprocessor/)
      assert_equal 3, labels.uniq.size, names.inspect
      assert_equal labels.map { |label| out[/^(#{Regexp.escape(label)}) /, 1] }, labels, "the summary says the same labels"

      # --thread takes one label, or the name they share.
      text, err, status = gvlscope("report", trace, "--thread", labels.first, chdir: dir)
      assert status.success?, err
      assert_equal 1, text.scan(/^processor #\d+ /).size, text
      text, err, status = gvlscope("report", trace, "--thread", "processor", chdir: dir)
      assert status.success?, err
      assert_equal 3, text.scan(/^processor #\d+ /).size, text

      _out, err, status = gvlscope("export", trace, "--format", "chrome-json", chdir: dir)
      assert status.success?, err
      events = JSON.parse(File.read(File.join(dir, "t.json")))
      events = events["traceEvents"] if events.is_a?(Hash)
      exported = events.select { |e| e["name"] == "thread_name" }.map { |e| e["args"]["name"] }
      assert_equal 3, exported.grep(/\Aprocessor #\d+ \(fakepool-1\.2\.3\/lib\/fakepool\.rb:4\)\z/).uniq.size, exported.inspect
      assert_equal 2, exported.grep(/\Athread \d+ \(fakepool-1\.2\.3\/lib\/fakepool\.rb:4\)\z/).uniq.size, exported.inspect
    end
  end

  def test_live_metrics_label_threads_as_a_trace_does
    out, err, status = run_ruby(<<~RUBY)
      require "gvlscope"
      GVLScope::Metrics.enable
      gate = Queue.new
      threads = [Thread.new { gate.pop }, *Array.new(2) { Thread.new { Thread.current.name = "twin"; gate.pop } }]
      sleep 0.01 until threads.drop(1).all? { |t| t.name == "twin" }
      labels = GVLScope::Metrics.snapshot.threads.map(&:name)
      gate.close
      threads.each(&:join)
      puts labels
    RUBY
    assert status.success?, err
    labels = out.lines(chomp: true)
    assert_equal 1, labels.grep(/\Athread \d+ \(-e:4\)\z/).size, labels.inspect
    assert_equal 2, labels.grep(/\Atwin #\d+\z/).uniq.size, labels.inspect
  end

  def test_short_sites
    v = GVLScope::Vocabulary
    assert_equal "puma-8.0.2/lib/puma/thread_pool.rb:105",
                 v.short_site("/usr/local/lib/ruby/gems/3.3.0/gems/puma-8.0.2/lib/puma/thread_pool.rb:105")
    assert_equal "ruby/3.3.0/monitor.rb:201", v.short_site("/opt/rubies/3.3.8/lib/ruby/3.3.0/monitor.rb:201")
    assert_equal "app/jobs/x.rb:3", v.short_site("/srv/app/app/jobs/x.rb:3", "/srv/app")
    assert_equal "/elsewhere/x.rb:3", v.short_site("/elsewhere/x.rb:3", "/srv/app")
    assert_equal "thread 12 (puma-8.0.…thread_pool.rb:105)", v.fit("thread 12 (puma-8.0.2/lib/puma/thread_pool.rb:105)", 40)
  end
end
