# frozen_string_literal: true

module GVLScope
  # Text from outside (thread names, file paths, a user's arguments) on its way to a terminal:
  # control characters shown as escapes ("\e", "\a", "\u009B", "\u202E"), so that a name cannot
  # retitle the window, clear the screen or set the clipboard (OSC 0, CSI 2J, OSC 52), nor turn
  # the text after it around (the bidi overrides, as in "Trojan Source").
  module Printable
    # Unicode's bidirectional formatting characters: marks (ALM, LRM, RLM), embeddings and
    # overrides (LRE..RLO, U+202E the right-to-left override), isolates (LRI..PDI).
    BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
    # C0, DEL, C1 and BIDI; ESC is among C0.
    CONTROL = /[\x00-\x1f\x7f\u0080-\u009f#{BIDI}]/
    # The same, with the line breaks and tabs a multi-line message has.
    CONTROL_BUT_LINES = /[\x00-\x08\x0b-\x1f\x7f\u0080-\u009f#{BIDI}]/

    module_function

    # +string+ (UTF-8; invalid bytes become U+FFFD) with its control characters escaped.
    def text(string) = escape(string, CONTROL)

    # A message of several lines, each of them escaped as #text.
    def message(string) = escape(string, CONTROL_BUT_LINES)

    def escape(string, control)
      string = string.to_s
      string = string.dup.force_encoding(Encoding::UTF_8) unless string.encoding == Encoding::UTF_8
      string = string.scrub unless string.valid_encoding? # no copy for the usual name: the live server runs this in its host
      string.match?(control) ? string.gsub(control) { |char| char.dump[1..-2] } : string
    end
  end
end
