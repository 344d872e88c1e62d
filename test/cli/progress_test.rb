# frozen_string_literal: true

require "test_helper"
require "pty"
require "stringio"
require "tmpdir"
require "gvlscope/support/progress"

# The progress bar: on a terminal only, after 2 s, at most 10 draws a second, erased at the end;
# a pipe gets exactly the bytes it got before there was a bar. First with a clock the test turns
# (deterministic), then the real CLI with its stderr on a pseudo-terminal.
class ProgressTest < Minitest::Test
  include GVLScopeTestHelper

  FIXTURE = File.join(ROOT, "test/fixtures/traces/mixed.gvl")

  # A terminal as far as Progress can tell: tty? and a width.
  class Terminal < StringIO
    def initialize(columns = 100)
      super(+"")
      @columns = columns
    end

    def tty? = true
    def winsize = [24, @columns]
  end

  def progress(io, total: 800_000_000)
    @now = 0.0
    GVLScope::Progress.new(total, label: "reading big.gvl", io: io, clock: -> { @now })
  end

  def test_nothing_before_two_seconds_then_a_bar_at_most_ten_times_a_second_erased_at_the_end
    io = Terminal.new
    bar = progress(io)
    [0.5, 1.0, 1.99].each do |at|
      @now = at
      bar.advance_to(100_000_000)
    end
    assert_equal "", io.string, "a bar before 2 s"

    @now = 2.0
    bar.advance_to(440_000_000)
    assert_equal "\rgvlscope: [###########.........]  55%  440/800 MB  2 s  reading big.gvl\e[K", io.string
    io.truncate(0)
    io.rewind
    @now = 2.05
    bar.advance_to(450_000_000)
    assert_equal "", io.string, "drawn again 50 ms later"

    # Called every ms for 10 more seconds: one draw per 100 ms.
    (1..10_000).each do |ms|
      @now = 2.05 + ms / 1000.0
      bar.advance_to(450_000_000 + ms * 1000)
    end
    draws = io.string.scan("\r").size
    assert_includes 99..101, draws
    assert_match(/\rgvlscope: \[###########\.{9}\]  57%  460\/800 MB  12 s  reading big.gvl\e\[K\z/, io.string)

    io.truncate(0)
    io.rewind
    bar.finish
    assert_equal "\r\e[K", io.string, "the bar is erased"
    @now = 20.0
    bar.advance_to(800_000_000)
    bar.phase("writing")
    assert_equal "\r\e[K", io.string, "nothing drawn after finish"
  end

  # A phase nobody measures shows its name and the time; a line never wraps; lines printed
  # meanwhile erase the bar first.
  def test_phases_width_and_lines_printed_meanwhile
    io = Terminal.new(40)
    bar = progress(io)
    @now = 3.0
    bar.phase("building the timeline of 10000000 events")
    assert_equal "\rgvlscope: 3 s  building the timeline of\e[K", io.string, "39 characters: one less than the width"
    bar.puts "gvlscope: warning: something"
    assert_equal "\rgvlscope: 3 s  building the timeline of\e[K\r\e[Kgvlscope: warning: something\n", io.string
    io.truncate(0)
    io.rewind
    bar.finish
    assert_equal "", io.string, "nothing to erase"
  end

  def test_not_a_terminal_gets_only_the_lines_printed
    io = StringIO.new(+"")
    bar = progress(io)
    threads = Thread.list.size
    @now = 100.0
    bar.ticking do
      assert_equal threads, Thread.list.size, "a ticker thread for a pipe"
      bar.phase("reading")
      bar.advance_to(1)
      bar.puts "gvlscope: wrote x"
    end
    bar.finish
    assert_equal "gvlscope: wrote x\n", io.string
  end

  # The ticker redraws a phase that reports nothing (the elapsed time moves on) and stops with
  # the block.
  def test_ticking_redraws_while_the_block_runs
    io = Terminal.new
    skipped = 0
    bar = GVLScope::Progress.new(nil, label: "analysing", io: io,
                                      clock: -> { Process.clock_gettime(Process::CLOCK_MONOTONIC) + skipped })
    skipped = 10 # as if it had run 10 s already
    threads = Thread.list.size
    bar.ticking { sleep 0.05 until io.string.scan("\r").size >= 2 }
    assert_equal threads, Thread.list.size, "the ticker outlived the block"
    assert_match(/\A\rgvlscope: 1\d s  analysing\.\.\.\e\[K/, io.string)
  end

  # What a reader tells the bar, in order: [:phase, label, total] and [:advance, bytes].
  class Steps
    attr_reader :steps, :label, :total_bytes

    def initialize = @steps = []

    def phase(label, total_bytes = nil)
      @label = label
      @total_bytes = total_bytes
      @steps << [:phase, label, total_bytes]
    end

    def advance_to(bytes) = @steps << [:advance, bytes]
  end

  # `report --html`: the page's intervals are one more pass over the trace, made while the CLI's
  # bar says "writing PATH". The bar shows that pass with its own label, moving, then "writing
  # PATH" again (the page is still being made): never the main pass's label, stopped where the
  # pass stopped, while the page is built.
  def test_the_pages_pass_has_its_own_step_and_the_bar_returns_to_writing
    require "gvlscope/analysis"
    require "gvlscope/formats/report_html"
    steps = Steps.new
    scan = GVLScope::Model::Scan.open(FIXTURE, bins: GVLScope::Analysis::Overview::BINS, progress: steps)
    report = GVLScope::Analysis::Report.new(scan)
    steps.phase("writing r.html") # as the CLI does before the page
    before = steps.steps.size
    GVLScope::Formats::ReportHTML.new(report).to_s
    during = steps.steps.drop(before)
    size = File.size(FIXTURE)
    assert_equal [:phase, "reading the timeline's intervals of #{FIXTURE}", size], during.first
    assert_operator during.count { |step| step.first == :advance }, :>=, 1, "the pass tells how far it got"
    assert_equal [:phase, "writing r.html", nil], during.last, "after the pass: the step it interrupted"
    assert_equal 2, during.count { |step| step.first == :phase }
  end

  # The real command: the same child Ruby with its stderr on a pseudo-terminal, then on a pipe.
  # The child shortens DELAY_S to 0 so that a quick command shows its bar.
  CLI = <<~RUBY
    require "gvlscope/support/progress"
    GVLScope::Progress.send(:remove_const, :DELAY_S)
    GVLScope::Progress.const_set(:DELAY_S, 0.0)
    require "gvlscope/cli"
    exit GVLScope::CLI.start(ARGV)
  RUBY

  def cli_on_a_terminal(*args, dir:)
    master, terminal = PTY.open
    pid = Process.spawn(RbConfig.ruby, "-I", File.join(ROOT, "lib"), "-e", CLI, *args, in: File::NULL,
                        out: File.join(dir, "stdout"), err: terminal)
    terminal.close
    output = +""
    begin
      loop { output << master.readpartial(4096) }
    rescue Errno::EIO, EOFError
      nil # the child closed the terminal
    end
    _, status = Process.wait2(pid)
    assert status.success?, output
    output
  ensure
    master&.close
  end

  def test_the_cli_draws_on_a_terminal_and_writes_the_same_bytes_as_before_on_a_pipe
    Dir.mktmpdir("gvlscope-progress") do |dir|
      html = File.join(dir, "r.html")
      pftrace = File.join(dir, "r.pftrace")
      commands = {
        ["report", FIXTURE, "--html", html, "--force"] => "gvlscope: wrote #{html}\n",
        ["export", FIXTURE, "--format", "perfetto", "-o", pftrace, "--force"] => "gvlscope: wrote #{pftrace} (930 events, 7 threads)\n",
        ["summary", FIXTURE] => "",
      }
      commands.each do |args, before|
        _out, err, status = run_ruby(CLI, *args)
        assert status.success?, err
        assert_equal before, err, "stderr on a pipe is not what it was: #{args.first}"

        shown = cli_on_a_terminal(*args, dir: dir)
        # Which steps are drawn depends on the time each takes (one draw per 100 ms at most).
        assert_match(/\A\rgvlscope: \d+ s  (starting|reading #{Regexp.escape(FIXTURE)}|building the timeline .*|analysing|writing .*)\.\.\.\e\[K/,
                     shown, args.first)
        # Erased before anything else is printed and at the end: what stays is what a pipe gets
        # (the terminal ends lines with \r\n).
        lines = shown.gsub(/\r[^\r\n]*\e\[K/, "").gsub(/\r\e\[K/, "")
        assert_equal before.gsub("\n", "\r\n"), lines, args.first
        assert shown.end_with?("\r\e[K#{before.gsub("\n", "\r\n")}"), "#{args.first}: the bar was not erased: #{shown.inspect}"
      end
    end
  end
end
