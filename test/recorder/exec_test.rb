# frozen_string_literal: true

require "test_helper"
require "tmpdir"

# exec replaces the process without at_exit: a running trace is stopped just before it (complete,
# with its end record), and an exec that fails leaves the program going on, traced into the next
# free name (fork.rb's ExecHook). Under `gvlscope run`: test/recorder/transparency_test.rb.
class ExecTest < Minitest::Test
  include GVLScopeTestHelper

  def test_a_trace_ends_complete_before_exec
    Dir.mktmpdir("gvlscope-exec") do |dir|
      path = File.join(dir, "t.gvl")
      out, err, status = run_ruby(<<~RUBY, path)
        require "gvlscope"
        GVLScope.start(ARGV[0])
        Thread.new { sleep 0.001 }.join
        Process.exec(RbConfig.ruby, "-e", "puts 'new image'")
      RUBY
      assert status.success?, err
      assert_equal "new image\n", out
      file = GVLScope::Model::TraceFile.read(path)
      refute file.truncated?, "no end record: #{file.warnings.inspect}"
      assert_operator file.size, :>, 0
    end
  end

  def test_after_a_failed_exec_the_trace_goes_on_in_the_next_file
    Dir.mktmpdir("gvlscope-exec") do |dir|
      path = File.join(dir, "t.gvl")
      out, err, status = run_ruby(<<~RUBY, path)
        require "gvlscope"
        GVLScope.start(ARGV[0], stacks: false)
        Thread.new { sleep 0.001 }.join
        begin
          exec(File.join(File.dirname(ARGV[0]), "no-such-program"))
        rescue Errno::ENOENT
          puts "ENOENT"
        end
        Thread.new { sleep 0.001 }.join
        summary = GVLScope.stop
        puts File.basename(summary.path)
      RUBY
      assert status.success?, err
      assert_equal "ENOENT\nt-2.gvl\n", out
      before, after = %w[t.gvl t-2.gvl].map { |name| GVLScope::Model::TraceFile.read(File.join(dir, name)) }
      refute before.truncated?
      refute after.truncated?
      assert_equal 2, after.thread_info.size, after.thread_info.inspect # main and the thread after the exec
      assert_nil after.stack_counts, "the options (stacks: false) carry over"
    end
  end

  # The hook must not prepend to Kernel: that renames every Kernel method in frames (`Kernel.sleep`
  # for `Kernel#sleep`), and release sites of sleep lost their cause (test/analysis/code_locations_test.rb).
  def test_kernel_keeps_its_ancestors_and_exec_stays_private
    assert_equal Kernel, Kernel.ancestors.first
    refute Object.new.respond_to?(:exec)
    assert Kernel.private_method_defined?(:exec)
  end
end
