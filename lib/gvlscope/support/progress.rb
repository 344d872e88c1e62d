# frozen_string_literal: true

module GVLScope
  # A one-line progress bar on a terminal, for commands that read big traces:
  #
  #   gvlscope: [###########.........]  55%  440/800 MB  6 s  reading big.gvl
  #
  # It shows only on a terminal (io.tty?; anything else gets not one byte, so a pipe, a file or
  # CI log sees what it saw before), only once the work has taken DELAY_S (a quick command
  # stays silent), at most once per REFRESH_S, and it erases itself at #finish.
  #
  # The work is in phases: #phase("building the timeline") names the next one and, when it has a
  # measure (the bytes of a file), its total; #advance_to(bytes) says how far it got, and is cheap
  # enough to call after every MB read (one clock read; a draw at most 10 times a second). A phase
  # without a measure shows its name and the time so far; #ticking keeps that line up to date
  # while a long call runs that reports nothing itself.
  #
  # Used by the CLI (cli.rb) and by the readers it passes it to. Here at the top level, beside
  # units.rb: model/ and analysis/ readers call it, and they must not depend on cli.rb.
  class Progress
    DELAY_S = 2.0 # shorter work shows no bar
    REFRESH_S = 0.1
    BAR = 20 # characters of the bar itself
    MB = 1_000_000

    attr_reader :label, :total_bytes, :bytes

    # +total_bytes+: the first phase's measure (nil: none). +clock+: seconds, monotonic (tests
    # give their own).
    def initialize(total_bytes, label:, io: $stderr, clock: -> { Process.clock_gettime(Process::CLOCK_MONOTONIC) })
      @io = io
      @tty = io.respond_to?(:tty?) && io.tty?
      @clock = clock
      @label = label
      @total_bytes = total_bytes
      @bytes = 0
      @measured = false # a phase shows a bar once someone reports how far it got
      @drawn = false
      @finished = false
      @lock = Mutex.new
      return unless @tty

      @started = clock.call
      @next_draw = @started + DELAY_S
    end

    def tty? = @tty

    # How far the phase got, in bytes of its total.
    def advance_to(bytes)
      @bytes = bytes
      @measured = true
      refresh if @tty
    end

    # The next phase of the work: its label and measure (nil: none).
    def phase(label, total_bytes = nil)
      @label = label
      @total_bytes = total_bytes
      @bytes = 0
      @measured = false
      refresh if @tty
    end

    # Runs the block; on a terminal, a thread redraws the line meanwhile (the elapsed time moves
    # on), for a call that cannot report how far it got. Returns the block's value.
    def ticking
      return yield unless @tty

      done = false
      ticker = Thread.new do
        until done
          sleep REFRESH_S
          refresh unless done
        end
      end
      begin
        yield
      ensure
        done = true # not Thread#kill: it could cut a line being written
        begin
          ticker.wakeup
        rescue ThreadError
          nil # it had ended
        end
        ticker.join
      end
    end

    # Runs the block with the bar erased (it comes back at the next update): for output to the
    # same terminal, on this io or on stdout.
    def pause
      @lock.synchronize do
        erase
        yield
      end
    end

    # Prints +line+ (and a newline) to the io, the bar erased first.
    def puts(line) = pause { @io.puts line }

    # Erases the bar, for good.
    def finish
      @lock.synchronize do
        erase
        @finished = true
      end
    end

    # The bar's text at +now+ (seconds on the clock): the numbers first, the label (a path, maybe
    # long) last, where a narrow terminal cuts it.
    def line(now)
      elapsed = "#{(now - @started).floor} s"
      return "gvlscope: #{elapsed}  #{@label}..." unless @measured && @total_bytes&.positive?

      share = (@bytes.to_f / @total_bytes).clamp(0.0, 1.0)
      filled = (share * BAR).floor
      format("gvlscope: [%s%s] %3d%%  %s/%s MB  %s  %s", "#" * filled, "." * (BAR - filled), (share * 100).floor,
             megabytes(@bytes), megabytes(@total_bytes), elapsed, @label)
    end

    private

    def megabytes(bytes) = (bytes.to_f / MB).round.to_s

    # Draws when due. The ticker and the worker may both call it: one draws, the other returns.
    def refresh
      now = @clock.call
      return if now < @next_draw || @finished
      return unless @lock.try_lock

      begin
        return if @finished

        @next_draw = now + REFRESH_S
        # The line fits the terminal: a wrapped line could not be erased with \r.
        text = line(now)[0, columns - 1]
        @io.write("\r#{text}\e[K")
        @io.flush
        @drawn = true
      ensure
        @lock.unlock
      end
    end

    def erase
      return unless @drawn

      @io.write("\r\e[K")
      @io.flush
      @drawn = false
    end

    def columns
      require "io/console"
      width = @io.winsize[1] if @io.respond_to?(:winsize)
      width&.positive? ? width : 80
    rescue SystemCallError, NotImplementedError, LoadError
      80
    end
  end
end
