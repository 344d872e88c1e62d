# frozen_string_literal: true

require "test_helper"
require "tmpdir"

# Daemonizers and test harnesses close every inherited descriptor (`(3..1024).each { |fd|
# IO.for_fd(fd).close rescue nil }`) and then open files of their own, which get the lowest free
# numbers: the number gvlscope wrote its trace to may then be the program's file. gvlscope must
# never write into it (issue 37: a 9-byte file became 665 bytes of trace chunks, exit status 0).
# Each program below makes every free number its own file, whatever number gvlscope held.
class DescriptorsTest < Minitest::Test
  include GVLScopeTestHelper

  # Closes every descriptor from 3 (the trace's among them), opens ARGV[0] and duplicates it onto
  # every free number up to 1023, writes its 9 bytes, and goes on making GVL events and threads
  # (thread records and event chunks for the writer to write, then the end of the trace).
  TAKE_EVERY_DESCRIPTOR = <<~RUBY
    require "fcntl"
    def take_every_descriptor(path)
      (3..1024).each do |fd|
        IO.for_fd(fd, autoclose: true).close
      rescue StandardError
        nil
      end
      file = File.open(path, "w")
      (file.fileno + 1..1023).each do |fd|
        file.fcntl(Fcntl::F_DUPFD, fd)
      rescue SystemCallError
        nil
      end
      file.write("123456789")
      file.flush
      file
    end

    def more_events = 4.times.map { Thread.new { 3000.times { Thread.pass } } }.each(&:join)
  RUBY

  def test_gvlscope_run_never_writes_into_a_file_that_took_the_traces_descriptor
    Dir.mktmpdir("gvlscope-descriptors") do |dir|
      File.write(File.join(dir, "closer.rb"), <<~RUBY)
        #{TAKE_EVERY_DESCRIPTOR}
        Thread.new { sleep 0.01 }.join
        take_every_descriptor("data.txt")
        more_events
        puts "done"
      RUBY
      out, err, status = gvlscope("run", "--no-report", "-o", "t-%p.gvl", "--", RbConfig.ruby, "closer.rb", chdir: dir)
      assert_equal "done\n", out, err
      assert status.success?, err
      assert_untouched File.join(dir, "data.txt")
      assert_equal 1, err.scan(/the program closed the trace's file descriptor .*the trace stopped there/).size, err
    end
  end

  def test_a_trace_stops_when_its_descriptor_is_taken
    Dir.mktmpdir("gvlscope-descriptors") do |dir|
      out, err, status = run_ruby(<<~RUBY, dir)
        require "gvlscope"
        #{TAKE_EVERY_DESCRIPTOR}
        Dir.chdir(ARGV[0])
        GVLScope.start("t.gvl")
        Thread.new { sleep 0.01 }.join
        take_every_descriptor("data.txt")
        more_events
        summary = GVLScope.stop
        puts summary.dropped.positive?, summary.write_error
      RUBY
      assert status.success?, err
      assert_untouched File.join(dir, "data.txt")
      dropped, why = out.lines(chomp: true)
      assert_equal "true", dropped, out
      assert_match(/the program closed the trace's file descriptor/, why)
    end
  end

  # A flight recorder dump holds its file for one call: the program's other threads may close it
  # meanwhile (the dump's wait without the GVL held open 300 ms). The dump fails (counted, said,
  # no file kept); the program's file is untouched.
  def test_a_flight_recorder_dump_never_writes_into_a_file_that_took_its_descriptor
    Dir.mktmpdir("gvlscope-descriptors") do |dir|
      out, err, status = run_ruby(<<~RUBY, dir)
        require "gvlscope"
        #{TAKE_EVERY_DESCRIPTOR}
        Dir.chdir(ARGV[0])
        GVLScope::FlightRecorder.start(seconds: 10, dir: "dumps")
        more_events
        GVLScope::Native.debug_nogvl_delay_us = 300_000
        dumper = Thread.new { GVLScope::FlightRecorder.dump("slow") }
        sleep 0.1 # the dump has its file and waits
        take_every_descriptor("data.txt")
        p dumper.value
        p GVLScope::FlightRecorder.failed
      RUBY
      assert status.success?, err
      assert_untouched File.join(dir, "data.txt")
      assert_equal "nil\n1\n", out, err
      assert_match(/dump failed .*the program closed the trace's file descriptor/, err)
      assert_empty Dir.children(File.join(dir, "dumps")).grep(/\.gvl\z/)
    end
  end

  private

  def assert_untouched(path)
    data = File.binread(path)
    assert data == "123456789", "the program's 9-byte file holds #{data.bytesize} bytes: #{data[0, 40].inspect}..."
  end
end
