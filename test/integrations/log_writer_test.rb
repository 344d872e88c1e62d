# frozen_string_literal: true

require "test_helper"
require "stringio"
require "gvlscope/integrations/log_writer"

# GVLScope::LogWriter: the slow-request lines are written by a thread of its own, never by the
# caller; a full queue drops lines (the caller never waits) and a line then says how many.
class LogWriterTest < Minitest::Test
  # A logger whose #warn waits until the test opens the gate: the writer thread is held mid-line.
  class GatedLogger
    attr_reader :lines, :threads

    def initialize
      @gate = Thread::Queue.new
      @lines = []
      @threads = []
    end

    def open = @gate.close

    def warn(line)
      @gate.pop
      @threads << Thread.current
      @lines << line
    end
  end

  def test_lines_are_written_by_another_thread_in_order
    logger = GatedLogger.new
    logger.open
    writer = GVLScope::LogWriter.new
    3.times { |i| assert writer.write("line #{i}", logger) }
    assert writer.flush(30)
    assert_equal ["line 0", "line 1", "line 2"], logger.lines
    assert_equal [GVLScope::LogWriter::THREAD_NAME], logger.threads.map(&:name).uniq
    refute_includes logger.threads, Thread.current
  end

  def test_a_full_queue_drops_and_counts_and_the_caller_never_waits
    logger = GatedLogger.new
    writer = GVLScope::LogWriter.new(capacity: 2)
    assert writer.write("first", logger)
    Thread.pass until writer.instance_variable_get(:@queue).empty? # the writer holds "first", blocked in #warn
    assert writer.write("second", logger)
    assert writer.write("third", logger)
    refute writer.write("fourth", logger), "the queue is full: dropped, not waited for"
    refute writer.write("fifth", logger)
    assert_equal 2, writer.dropped
    logger.open
    assert writer.flush(30)
    assert_equal ["first", "second", "third",
                  "gvlscope: 2 slow-request lines were dropped: the log did not keep up"], logger.lines
    assert_equal 0, writer.dropped
  end

  def test_without_a_logger_lines_go_to_stderr
    writer = GVLScope::LogWriter.new
    captured = StringIO.new
    previous = $stderr
    $stderr = captured
    writer.write("to stderr")
    assert writer.flush(30)
    assert_equal "to stderr\n", captured.string
  ensure
    $stderr = previous
  end
end
