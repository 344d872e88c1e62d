# frozen_string_literal: true

require "optparse"
require_relative "version"
require_relative "errors"

module GVLScope
  # The `gvlscope` command. Reading traces needs no native code, so every command but tracing
  # itself works on any Ruby.
  class CLI
    USAGE = <<~TEXT
      Usage: gvlscope COMMAND [options]

      See and measure CRuby's Global VM Lock (GVL).

      Commands:
        export FILE --format perfetto|chrome-json [-o OUT]
                              convert a .gvl trace for Perfetto UI / chrome://tracing / speedscope
        summary FILE          per-thread GVL times of a .gvl trace

      Options:
        -h, --help            show this help (also: gvlscope COMMAND --help)
        -v, --version         print the version
    TEXT

    class UsageError < StandardError; end

    def initialize(out: $stdout, err: $stderr)
      @out = out
      @err = err
    end

    def run(argv)
      argv = argv.dup
      command = argv.shift
      case command
      when nil, "-h", "--help", "help"
        @out.puts USAGE
        0
      when "-v", "--version"
        @out.puts "gvlscope #{VERSION}"
        0
      when "export" then export(argv)
      when "summary" then summary(argv)
      else
        raise UsageError, "unknown command '#{command}'"
      end
    rescue UsageError, OptionParser::ParseError => e
      @err.puts "gvlscope: #{e.message}\n\n#{USAGE}"
      2
    rescue Error, SystemCallError => e
      @err.puts "gvlscope: #{e.message}"
      1
    end

    private

    def load_reader
      require_relative "trace_file"
      require_relative "timeline"
    end

    def timeline_of(path)
      raise UsageError, "missing trace FILE" unless path
      raise Error, "#{path}: no such file" unless File.exist?(path)

      load_reader
      file = TraceFile.read(path)
      file.warnings.each { |warning| @err.puts "gvlscope: warning: #{warning}" }
      Timeline.new(file)
    end

    EXPORT_FORMATS = { "perfetto" => ".pftrace", "chrome-json" => ".json" }.freeze

    def export(argv)
      format = nil
      output = nil
      parser = OptionParser.new do |opts|
        opts.banner = "Usage: gvlscope export FILE --format perfetto|chrome-json [-o OUT]"
        opts.on("-f", "--format FORMAT", EXPORT_FORMATS.keys, "perfetto (.pftrace) or chrome-json (.json)") { |f| format = f }
        opts.on("-o", "--output OUT", "output file (default: FILE with the format's extension)") { |o| output = o }
        opts.on("-h", "--help", "show this help") { @out.puts opts; return 0 }
      end
      path, = parser.parse(argv)
      raise UsageError, "export needs --format (perfetto or chrome-json)" unless format

      timeline = timeline_of(path)
      output ||= path.sub(/\.gvl\z/, "") + EXPORT_FORMATS.fetch(format)
      require_relative "exporters/chrome_json"
      require_relative "exporters/perfetto"
      exporter = format == "perfetto" ? Exporters::Perfetto : Exporters::ChromeJSON
      File.open(output, "wb") { |io| exporter.new(timeline).write(io) }
      @err.puts "gvlscope: wrote #{output} (#{timeline.file.size} events, #{timeline.threads.size} threads)"
      0
    end

    def summary(argv)
      parser = OptionParser.new do |opts|
        opts.banner = "Usage: gvlscope summary FILE"
        opts.on("-h", "--help", "show this help") { @out.puts opts; return 0 }
      end
      path, = parser.parse(argv)
      timeline = timeline_of(path)
      require_relative "summary"
      @out.puts Summary.new(timeline).to_s
      0
    end
  end
end
