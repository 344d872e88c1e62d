# frozen_string_literal: true

require_relative "../test_helper"
require "open3"
require "rbconfig"
require "tmpdir"

# The C recorder's files use each other without a circle (script/check-c-layers): the hook and the
# thread state call down only, consumers and sinks are told through callbacks they register.
class RecorderLayersTest < Minitest::Test
  ROOT = GVLScopeTestHelper::ROOT
  SCRIPT = File.join(ROOT, "script/check-c-layers")

  def check(*args)
    Open3.capture2e(RbConfig.ruby, SCRIPT, *args)
  end

  def test_the_recorder_has_no_circle
    objects = Dir[File.join(ROOT, "tmp", "*", "gvlscope", RUBY_VERSION)].find { |d| Dir[File.join(d, "*.o")].any? }
    skip "no object files of ext/gvlscope for Ruby #{RUBY_VERSION} under tmp/ (run `bundle exec rake compile`)" unless objects
    out, status = check("--objects", objects)
    assert status.success?, "script/check-c-layers found circles in ext/gvlscope:\n#{out}"
    assert_match(/^no circle$/, out)
  end

  # Small C files compiled here: the script must see a circle through nm (a.c and b.c call each
  # other), through a header's inline function (c.h's calls d.c, which uses c.h's macro), and a
  # use of the module only the Init file may use.
  def test_it_finds_circles_in_a_small_example
    Dir.mktmpdir("gvlscope-layers") do |dir|
      write = ->(name, text) { File.write(File.join(dir, name), text) }
      write.("a.h", "int a_f(int x);\n")
      write.("a.c", %(#include "a.h"\n#include "b.h"\nint a_f(int x) { return x ? b_f(x - 1) : 0; }\n))
      write.("b.h", "int b_f(int x);\n")
      write.("b.c", %(#include "b.h"\n#include "a.h"\nint b_f(int x) { return a_f(x); }\n))
      write.("c.h", %(#ifndef C_H\n#define C_H\n#define C_SIZE 4\nint d_f(int x);\nstatic inline int c_twice(int x) { return d_f(x) * 2; }\n#endif\n))
      write.("d.c", %(#include "c.h"\nint d_f(int x) { return x + C_SIZE; }\n))
      write.("e.c", %(#include "c.h"\nint e_f(int x) { return c_twice(x); }\n))
      compile(dir, %w[a b d e])
      out, status = check("--src", dir, "--objects", dir)
      assert_equal 1, status.exitstatus, out
      assert_match(/^circle \d: a, b$/, out)
      assert_match(/^  a -> b: b_f$/, out)
      assert_match(/^circle \d: c, d$/, out)
      assert_match(/^  c -> d: d_f$/, out)
      assert_match(/^  d -> c: C_SIZE$/, out)
      refute_match(/^no circle$/, out)

      # The same files without the calls back up: no circle. e.c uses c.h only (down).
      write.("b.c", %(#include "b.h"\nint b_f(int x) { return x; }\n))
      write.("d.c", %(int d_f(int x) { return x + 4; }\n))
      compile(dir, %w[b d])
      out, status = check("--src", dir, "--objects", dir, "--edges")
      assert status.success?, out
      assert_match(/^no circle$/, out)
      assert_match(/^  e -> c: c_twice$/, out)
      assert_match(/^  e -> d: d_f$/, out)

      out, status = check("--src", dir, "--objects", dir, "--top", "d")
      assert_equal 1, status.exitstatus, out
      assert_match(/only gvlscope may use it/, out)
    end
  end

  def test_it_says_when_objects_are_missing
    Dir.mktmpdir("gvlscope-layers") do |dir|
      File.write(File.join(dir, "a.c"), "int a_f(void) { return 0; }\n")
      out, status = check("--src", dir, "--objects", dir)
      assert_equal 2, status.exitstatus, out
      assert_match(/a\.o/, out)
    end
  end

  private

  def compile(dir, names)
    cc = RbConfig::CONFIG["CC"].split.first
    names.each do |name|
      out, status = Open3.capture2e(cc, "-c", "-O2", "-o", File.join(dir, "#{name}.o"), File.join(dir, "#{name}.c"))
      assert status.success?, "#{cc} #{name}.c: #{out}"
    end
  end
end
