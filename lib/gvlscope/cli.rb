# frozen_string_literal: true

require_relative "version"

module GVLScope
  # The `gvlscope` command. Loads the native recorder only for commands that need it, so
  # `--help` and `--version` answer on any Ruby.
  class CLI
    USAGE = <<~TEXT
      Usage: gvlscope COMMAND [options]

      See and measure CRuby's Global VM Lock (GVL).

      Options:
        -h, --help            show this help
        -v, --version         print the version
    TEXT

    def initialize(out: $stdout, err: $stderr)
      @out = out
      @err = err
    end

    def run(argv)
      case argv.first
      when nil, "-h", "--help", "help"
        @out.puts USAGE
        0
      when "-v", "--version"
        @out.puts "gvlscope #{VERSION}"
        0
      else
        @err.puts "gvlscope: unknown command '#{argv.first}'\n\n#{USAGE}"
        2
      end
    end
  end
end
