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
        run [-o PATH] [--no-summary] -- COMMAND [ARGS...]
                              run a Ruby program traced from boot (no code change); print a summary
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
      when "run" then run_command(argv)
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

    # Runs COMMAND with the recorder loaded at boot through RUBYOPT, so any Ruby it starts (and
    # every forked child) writes a trace; the program's output and exit status pass through.
    def run_command(argv)
      output = nil
      show_summary = true
      parser = OptionParser.new do |opts|
        opts.banner = "Usage: gvlscope run [options] -- COMMAND [ARGS...]"
        opts.on("-o", "--output PATH", "trace file (default gvlscope-<pid>.gvl; %p = pid)") { |o| output = o }
        opts.on("--no-summary", "do not print the summary at exit") { show_summary = false }
        opts.on("-h", "--help", "show this help") { @out.puts opts; return 0 }
      end
      command = parser.order(argv)
      command.shift if command.first == "--"
      raise UsageError, "run needs a COMMAND (gvlscope run -- ruby app.rb)" if command.empty?

      require "tmpdir"
      list = File.join(Dir.tmpdir, "gvlscope-run-#{Process.pid}.list")
      lib = File.expand_path("..", __dir__)
      env = {
        "RUBYOPT" => [ENV.fetch("RUBYOPT", nil), "-I#{lib}", "-rgvlscope/autorun"].compact.join(" "),
        "GVLSCOPE_OUTPUT" => File.expand_path(output || "gvlscope-%p.gvl"),
        "GVLSCOPE_SUMMARY_LIST" => list,
      }
      pid = begin
        Process.spawn(env, *command)
      rescue SystemCallError => e
        raise Error, "cannot run #{command.first}: #{e.message}"
      end
      # Child processes are ours to wait for, not to interrupt: Ctrl-C reaches them directly.
      previous = trap("INT", "IGNORE")
      _, status = Process.wait2(pid)
      trap("INT", previous)
      traces = File.exist?(list) ? File.readlines(list, chomp: true) : []
      File.delete(list) if File.exist?(list)
      if traces.empty?
        @err.puts "gvlscope: no trace was written (was COMMAND a Ruby >= 3.3 program?)"
      elsif show_summary
        load_reader
        require_relative "summary"
        traces.each do |path|
          @err.puts Summary.new(Timeline.new(TraceFile.read(path))).to_s
          @err.puts
        end
        @err.puts "gvlscope: traces: #{traces.join(', ')} (gvlscope export FILE --format perfetto)"
      end
      status.exitstatus || 128 + status.termsig.to_i
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
