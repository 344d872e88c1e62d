# frozen_string_literal: true

require_relative "../support/errors"

module GVLScope
  module Top
    # The interactive view: lines drawn with curses (the `curses` gem, the Ruby core team's binding
    # of ncurses: it knows the terminal from terminfo, so gvlscope writes no escape code itself)
    # and single keys read without echo.
    class Screen
      KEY_WAIT_MS = 100 # how often keys are looked at while waiting for the next refresh

      # The view, or nil when the curses gem is missing (nothing installs it: it builds against
      # ncurses): +err+ is then told how to get it, and top prints plain frames instead.
      def self.open(err)
        begin
          require "curses"
        rescue LoadError
          err.puts "gvlscope top: the interactive view needs the curses gem, which is not installed " \
                   "(gem install curses, or add it to the Gemfile); printing plain frames"
          return nil
        end
        new
      end

      def initialize
        Curses.init_screen
        Curses.cbreak
        Curses.noecho
        Curses.nonl
        Curses.curs_set(0)
        Curses.stdscr.keypad(true)
        Curses.stdscr.timeout = KEY_WAIT_MS
        @closed = false
      end

      # The terminal's columns now (a frame is laid out for them: TopText::Frame#width).
      def width = Curses.cols

      # Draws +lines+ from the top, cut at the terminal's width and height; the first line bold.
      def draw(lines)
        Curses.erase
        height = Curses.lines
        width = Curses.cols
        lines.first(height).each_with_index do |line, row|
          Curses.setpos(row, 0)
          if row.zero?
            Curses.attron(Curses::A_BOLD) { Curses.addstr(line[0, width - 1]) }
          else
            Curses.addstr(line[0, width - 1])
          end
        end
        Curses.refresh
      end

      # The next key as a one-character String, :resize, or nil after KEY_WAIT_MS without one.
      def key
        key = Curses.getch
        return :resize if key == Curses::KEY_RESIZE
        return nil unless key.is_a?(String)

        key
      end

      def close
        return if @closed

        @closed = true
        Curses.close_screen
      end
    end
  end
end
