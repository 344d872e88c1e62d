# frozen_string_literal: true

require "optparse"
require "etc"
require_relative "version"
require_relative "support/errors"
require_relative "support/printable"
require_relative "formats"
require_relative "support/progress"
require_relative "support/units"
require_relative "support/output_file"
require_relative "cli/run"

module GVLScope
  # The `gvlscope` command (exe/gvlscope checks the Ruby first: supported_ruby.rb). Traces are
  # read by the report engine, the recorder's sibling extension.
  class CLI
    USAGE = <<~TEXT
      Usage: gvlscope COMMAND [options]

      See and measure CRuby's Global VM Lock (GVL).

      Commands:
        run [options] -- COMMAND [ARGS...]
                              run a Ruby program traced from boot (no code change); print a summary
        report FILE [--html OUT [--window FROM..TO]] [--json | --format FORMAT] [--thread NAME]
                              what the GVL did and why: findings, per-thread table, histograms
        export FILE --format #{Formats.for_command("export").map(&:name).join("|")} [-o OUT]
                              convert a trace for Perfetto UI / chrome://tracing / speedscope
        summary FILE          per-thread GVL times of a trace
        top PID | --url URL | -- COMMAND [ARGS...]
                              live view of a running process: GVL held %, waits, threads, findings
        advise FILE | --snapshot FILE | --pid PID | --url URL [--cores N] [--processes N] [--json]
                              how many threads (and processes) to run, with the reasoning
        diff A B [--format text|json]
                              what changed between two traces, two snapshot files or two /metrics scrapes
        lab list|run NAME|all the published GVL experiments, measured on this Ruby and judged

      FILE is a gvlscope trace (.gvl) or a gvl-tracing JSON trace.

      Options:
        -h, --help            show this help (also: gvlscope COMMAND --help)
        -v, --version         print the version
        --debug               show a backtrace when something goes wrong
        --partial             read a truncated trace (a killed process's) up to its last whole chunk

      Exit status: 0 success, 1 error (unreadable trace, failed write...), 2 bad usage;
      `run` and `top -- COMMAND` exit with the program's own status.
    TEXT

    class UsageError < StandardError; end

    include Run # `gvlscope run`: cli/run.rb

    # exe/gvlscope: runs the command and returns the exit status, or dies of the signal the program
    # run by `gvlscope run` died of (or of SIGPIPE, when what read stdout is gone).
    def self.start(argv)
      cli = new
      status = cli.run(argv)
      cli.die_of_signal
      status
    end

    # Signals whose default action dumps core: a core of gvlscope would mislead, 128+N says it.
    CORE_SIGNALS = %w[QUIT ILL TRAP ABRT IOT BUS FPE SEGV SYS XCPU XFSZ EMT].freeze

    # After `gvlscope run`, when the program died of a signal: gvlscope run dies of the same one,
    # so the shell or supervisor sees what it would have seen without gvlscope (bash's
    # "Terminated", a service manager's "killed by signal"). After a write to a closed pipe, of
    # SIGPIPE. Otherwise returns.
    def die_of_signal
      name = @signal && Signal.signame(@signal)
      return if name.nil? || CORE_SIGNALS.include?(name)

      [$stdout, $stderr].each do |io|
        io.flush
      rescue SystemCallError
        nil # the closed pipe itself
      end
      trap(name, "SYSTEM_DEFAULT") unless %w[KILL STOP].include?(name)
      Process.kill(name, Process.pid)
      sleep 1 # the signal ends the process on delivery; the exit status 128+N follows if it did not
    rescue ArgumentError
      nil # a signal Ruby reserves (VTALRM): 128+N
    end

    def initialize(out: $stdout, err: $stderr)
      @out = out
      @err = err
    end

    def run(argv)
      argv = argv.dup
      # --debug anywhere before a `--` (after it, the arguments are the traced program's).
      @debug = take_flag(argv, "--debug")
      @partial = take_flag(argv, "--partial")
      command = argv.shift
      @command = COMMANDS.include?(command) ? command : nil
      status = dispatch(command, argv)
      @out.flush # here, not at exit: a closed pipe is found where it is handled
      status
    rescue Errno::EPIPE
      # What read stdout is gone (`gvlscope report t.gvl | head -1`): stop silently and die of
      # SIGPIPE, as cat and grep do: the shell prints nothing, and `set -o pipefail` sees the
      # same 141 it sees for them (a status 0 would claim a whole output; 1 an error).
      @signal = Signal.list.fetch("PIPE")
      128 + @signal
    rescue UsageError, OptionParser::ParseError => e
      @err.puts "#{prefixed(Printable.message(e.message))} (see gvlscope#{" #{@command}" if @command} --help)"
      2
    rescue Error, SystemCallError => e
      raise if @debug

      @err.puts prefixed(Printable.message(e.message))
      1
    rescue StandardError => e
      raise if @debug

      @err.puts "gvlscope: internal error: #{e.class}: #{Printable.message(e.message)} (run with --debug for a backtrace)"
      1
    end

    private

    COMMANDS = %w[run top lab report export summary advise diff].freeze

    # The command's exit status.
    def dispatch(command, argv)
      case command
      when nil, "-h", "--help", "help"
        @out.puts USAGE
        0
      when "-v", "--version"
        @out.puts "gvlscope #{VERSION}"
        0
      when "run" then run_command(argv)
      when "top"
        require_relative "top/cli"
        Top::CLI.new(out: @out, err: @err).run(argv)
      when "lab"
        require_relative "lab/cli"
        Lab::CLI.new(out: @out, err: @err).run(argv)
      when "report" then with_progress { report(argv) }
      when "export" then with_progress { export(argv) }
      when "summary" then with_progress { summary(argv) }
      when "advise" then with_progress { advise(argv) }
      when "diff" then with_progress { diff(argv) }
      else
        raise UsageError, "unknown command '#{command}'"
      end
    end

    # An error's one line, said as gvlscope's once: a message of a part that names itself
    # ("gvlscope top: ...") is not prefixed again.
    def prefixed(message) = message.start_with?("gvlscope") ? message : "gvlscope: #{message}"

    # A global flag anywhere before a `--` (after it, the arguments are the traced program's).
    def take_flag(argv, flag)
      at = argv.index(flag)
      return false unless at && at < (argv.index("--") || argv.size)

      argv.delete_at(at)
      true
    end

    # A trace without its end record: the recorder writes one when the trace stops (at exit, and
    # before an exec); its absence does not tell which of these ended the process.
    NO_END_RECORD = "ended without an end record (the process was killed or exec'd, or the file was cut)"

    # The trace at +path+ as every command reads it: by the native engine in two passes that keep
    # no interval (Model::Scan; +bins+: the HTML overview's, +spill+: keep the intervals for an
    # export). +checked+: a truncated trace is an error unless --partial, and warnings are printed.
    # +analyse+: false when only an export is made of it (a lighter pass).
    def timeline_of(path, bins: nil, spill: false, checked: true, analyse: true)
      raise UsageError, "missing trace FILE" unless path
      raise Error, "#{path}: no such file" unless File.exist?(path)
      raise Error, "#{path}: is a directory, not a trace" if File.directory?(path)

      progress("reading #{path}", File.size(path))
      require_relative "model"
      scan = Model::Scan.new(Model::Scan.read(path), bins: bins, spill: spill, progress: @progress, analyse: analyse)
      file = scan.file
      raise Error, "#{path}: #{NO_END_RECORD}; --partial reads what it holds" if checked && file.truncated? && !@partial
      file.warnings.each { |warning| say "gvlscope: warning: #{Printable.message(warning)}" } if checked
      scan.run
    end

    # A progress bar on stderr while a command reads, analyses and writes (GVLScope::Progress:
    # only on a terminal, only after 2 s, erased at the end).
    def with_progress
      @progress = Progress.new(nil, label: "starting", io: @err)
      @progress.ticking { yield }
    ensure
      @progress&.finish
      @progress = nil
    end

    # The next step of the work, on the progress bar (nothing outside with_progress). +total_bytes+:
    # its measure, when whoever does it calls @progress.advance_to.
    def progress(message, total_bytes = nil)
      @progress&.phase(message, total_bytes)
    end

    # A line on stderr, the progress bar erased first.
    def say(line)
      @progress ? @progress.puts(line) : @err.puts(line)
    end

    # Output on stdout: a terminal shows it with stderr, so the progress bar is erased first.
    def print_out(&block)
      @progress ? @progress.pause(&block) : yield
    end

    EXPORT_FORMATS = Formats.for_command("export").map(&:name).freeze

    def export(argv)
      format = nil
      output = nil
      force = false
      parser = OptionParser.new do |opts|
        opts.banner = "Usage: gvlscope export FILE --format #{EXPORT_FORMATS.join('|')} [-o OUT] [--force]\n\nFormats:\n" \
                      "#{Formats.help('export').join("\n")}\n\n"
        opts.on("-f", "--format FORMAT", EXPORT_FORMATS, "one of the formats above") { |f| format = f }
        opts.on("-o", "--output OUT", "output file (default: FILE with the format's extension)") { |o| output = o }
        opts.on("--force", "overwrite OUT if it exists (otherwise an export, like a trace, never overwrites a file)") { force = true }
        opts.on("-h", "--help", "show this help") { @out.puts opts; return 0 }
      end
      path, = parser.parse(argv)
      raise UsageError, "export needs --format (#{EXPORT_FORMATS.join(' or ')})" unless format
      raise UsageError, "missing trace FILE" unless path

      output = export_output(path, format, output, force: force) # before the trace is read: a clash fails at once
      export_timeline(timeline_of(path, spill: true, analyse: false), path, format, output, force: force)
      0
    end

    # Where an export goes: FILE with the format's extension unless -o, under OutputFile's rule
    # (never the input trace; a file that exists only with +force+).
    def export_output(path, format, output, force:)
      output ||= path.sub(/\.(gvl|json)\z/, "") + Formats.fetch(format, command: "export").extension
      OutputFile.check!(output, inputs: [path], force: force, option: "-o")
      output
    end

    # An export this big or bigger is announced with its estimated size before it is written.
    EXPORT_HINT_BYTES = 100 * 1024 * 1024

    def export_timeline(timeline, path, format, output = nil, force: false)
      entry = Formats.fetch(format, command: "export")
      output = export_output(path, format, output, force: force)

      # Built before the file is opened: a format that cannot be made of this trace (folded
      # stacks of a trace without stacks) raises and leaves no empty file behind.
      exporter = entry.format_class.new(timeline)
      events = timeline.file.size
      hint = export_size_hint(output, entry, events)
      say hint if hint
      progress("writing #{output}")
      OutputFile.write(output, inputs: [path], force: force, option: "-o") { |io| exporter.write(io) }
      say "gvlscope: wrote #{output} (#{events} events, #{timeline.threads.size} threads)"
    end

    # Said before a big export is written: its size estimated from the trace's events.
    def export_size_hint(output, entry, events)
      estimate = events * entry.bytes_per_event
      return nil if estimate < EXPORT_HINT_BYTES

      smallest = Formats.for_command("export").reject(&:stacks).min_by(&:bytes_per_event)
      "gvlscope: writing #{output}: about #{Units.megabytes(estimate)} (#{events} events, ~#{entry.bytes_per_event} bytes each " \
        "as #{entry.name}#{"; #{smallest.name} is the most compact" unless smallest == entry})"
    end

    REPORT_FORMATS = Formats.for_command("report").map(&:name).freeze

    def report(argv)
      html = nil
      format = nil
      thread = nil
      window = nil
      force = false
      parser = OptionParser.new do |opts|
        opts.banner = "Usage: gvlscope report FILE [--html OUT [--window FROM..TO] [--force]] [--json | --format FORMAT] [--thread NAME]\n\n" \
                      "Findings (below), one per cause, ranked by the wait each explains, with evidence and fixes;\n" \
                      "per-thread times, GVL held % per Ractor and histograms of hold time, wait time and waiters\n" \
                      "at acquire.\nFILE: a .gvl trace or a gvl-tracing JSON trace.\n\n" \
                      "Findings (their kind in --json):\n#{finding_kinds_help}\n"
        opts.on("--html OUT", "also write a self-contained HTML report (timeline, histograms, findings)") { |o| html = o }
        opts.on("--window FROM..TO", "with --html: the timeline's intervals for this range only, every one (up to 1,000,000),",
                "time since the trace began with a unit (ns, us, ms, s): 12.5s..12.7s, 300..450ms;",
                "the page of a long trace shows the command for the range in view") { |range| window = range }
        opts.on("--force", "with --html: replace OUT if it exists (never the trace itself)") { force = true }
        opts.on("--json", "print the report as JSON (schema: docs/report.md) instead of text: --format json") do
          raise UsageError, "--json is --format json: give one of them" if format && format != "json"

          format = "json"
        end
        opts.on("--format FORMAT", REPORT_FORMATS, "print the report in this format (default text):",
                *Formats.help("report")) do |name|
          raise UsageError, "--json is --format json: give one of them" if format && format != name

          format = name
        end
        opts.on("--thread NAME", "only this thread's row and findings") { |name| thread = name }
        opts.on("-h", "--help", "show this help") { @out.puts opts; return 0 }
      end
      path, *extra = parser.parse(argv)
      raise UsageError, "report takes one FILE (got #{extra.size + 1})" unless extra.empty?
      raise UsageError, "--window chooses the HTML's intervals: it goes with --html OUT" if window && !html

      window_text = window
      window &&= Units.time_range_to_ns(window, "--window") # before the trace is read: a typo fails at once
      OutputFile.check!(html, inputs: [path], force: force, option: "--html") if html && path # so does a clash

      # The HTML's overview is summed in the same pass as the rest.
      require_relative "analysis/overview"
      bins = (Analysis::Overview::BINS if html || format == "html")
      report = report_of(timeline_of(path, bins: bins), thread: thread)
      window &&= window_in(report, window, window_text)
      progress("writing the report")
      case format
      when nil, "text"
        text = Formats::ReportText.new(report).to_s
        print_out { @out.puts text }
      else
        print_out { Formats.fetch(format, command: "report").format_class.new(report).write(@out) }
      end
      write_html(report, html, input: path, force: force, window: window) if html
      0
    end

    # One line per kind of finding (Analysis::KINDS): its name and what it means.
    def finding_kinds_help
      require_relative "analysis/rules"
      Analysis::KINDS.each_value.map { |kind| format("    %-14s %s\n", kind.name, kind.legend) }.join
    end

    # --window's [from_ns, to_ns] within the trace: its end cut to the trace's; one that starts
    # after the trace ended is an error.
    def window_in(report, (from, to), text)
      duration = report.duration_ns
      raise Error, "--window #{text}: starts after the trace ended (it lasts #{Units.seconds(duration)})" if from >= duration

      [from, [to, duration].min]
    end

    def report_of(timeline, thread: nil)
      require_relative "analysis"
      progress("analysing")
      Analysis::Report.new(timeline, thread: thread).tap(&:findings) # the rules run now, under "analysing"
    end

    # +input+: the trace the report is of (OutputFile refuses it as the page's path).
    def write_html(report, path, input:, force:, window: nil)
      progress("writing #{path}")
      page = Formats::ReportHTML.new(report, window: window)
      OutputFile.write(path, inputs: [input], force: force, option: "--html", text: true) { |io| page.write(io) }
      say "gvlscope: wrote #{path}"
      held_to = page.window_held&.last
      return unless window && held_to < window.last

      say "gvlscope: warning: --window #{Units.seconds(window.first)}..#{Units.seconds(window.last)} holds more than " \
          "#{Formats::ReportHTML::BUDGET.window_intervals.to_s.gsub(/\B(?=(\d{3})+\z)/, ',')} intervals: the page has every one " \
          "up to #{Units.seconds(held_to)}"
    end

    def summary(argv)
      parser = OptionParser.new do |opts|
        opts.banner = "Usage: gvlscope summary FILE\n\n" \
                    "Each thread's GVL times in a trace: run (holding it), wait (wanting it), idle (IO, sleep,\n" \
                    "locks) and GC, the longest wait, holds, waits, and what made it release the GVL.\n" \
                    "FILE: a .gvl trace or a gvl-tracing JSON trace. The findings: gvlscope report FILE.\n\n"
        opts.on("-h", "--help", "show this help") { @out.puts opts; return 0 }
      end
      path, = parser.parse(argv)
      timeline = timeline_of(path)
      print_out { Formats::SummaryText.new(timeline).write(@out) }
      0
    end
  
    DIFF_FORMATS = Formats.for_command("diff").map(&:name).freeze
    DIFF_BANNER = <<~TEXT
      Usage: gvlscope diff A B [--format #{DIFF_FORMATS.join('|')}]

      What changed in the GVL from A (before) to B (after): GVL wait per second, held %, p99 wait and
      findings (new, gone, changed) of the process, of each thread (matched by name and creation site,
      not serial), and per request of each route and job where the inputs have them, with a one-line
      verdict when the counts allow one ("not enough data" when not: the rules are in docs/diff.md).
      A and B, two of a kind:
        two traces       .gvl or gvl-tracing JSON (gvlscope run -o before.gvl -- ...)
        two snapshots    live snapshot files (gvlscope top --once --json PID > before.json)
        two scrapes      the Puma plugin's /metrics saved to files (curl -s URL > before.prom)

      Formats:
      #{Formats.help('diff').join("\n")}

    TEXT

    def diff(argv)
      format = "text"
      parser = OptionParser.new do |opts|
        opts.banner = DIFF_BANNER
        opts.on("-f", "--format FORMAT", DIFF_FORMATS, "text (the default) or json") { |f| format = f }
        opts.on("--json", "the same as --format json") { format = "json" }
        opts.on("-h", "--help", "show this help") { @out.puts opts; return 0 }
      end
      paths = parser.parse(argv)
      raise UsageError, "diff takes two inputs, A and B (got #{paths.size})" unless paths.size == 2

      require_relative "analysis/diff_inputs"
      require_relative "analysis/input_kind"
      kinds = paths.map { |path| Analysis::InputKind.of(path) }
      if kinds.uniq.size > 1
        raise Error, "#{paths[0]} is #{Analysis::Diff::KINDS.fetch(kinds[0])} and #{paths[1]} " \
                     "#{Analysis::Diff::KINDS.fetch(kinds[1])}: diff compares two of a kind"
      end

      sides = paths.zip(kinds).map do |path, kind|
        case kind
        when "trace"
          Analysis::DiffInputs.from_report(report_of(timeline_of(path)), path)
        when "snapshot"
          require_relative "live/snapshot"
          later, earlier = Live::Snapshot.read_file(path)
          Analysis::DiffInputs.from_snapshot(earlier ? later - earlier : later, path, kind: "snapshot")
        else
          require_relative "live/scrape"
          snapshot, breakdown = Live::Scrape.read_file(path)
          Analysis::DiffInputs.from_snapshot(snapshot, path, kind: "scrape", breakdown: breakdown)
        end
      end
      result = Analysis::Diff.new(*sides)
      progress("writing the diff")
      print_out { Formats.fetch(format, command: "diff").format_class.new(result).write(@out) }
      0
    end

    ADVISE_BANNER = <<~TEXT
      Usage: gvlscope advise FILE | --snapshot FILE | --pid PID | --url URL [options]

      How many threads each process should run (and whether to run more processes instead), from
      measured run / GVL wait / idle shares, with the reasoning and the model's numbers. Input, one of:
        FILE             a trace (.gvl or gvl-tracing JSON) of the process under load
        --snapshot FILE  a live snapshot file (JSON: one snapshot, or two to take the interval between)
        --pid PID        a running process with its live socket open (GVLSCOPE_LIVE=1): read twice
        --url URL        the Puma plugin's /metrics: read twice (needs --current-threads)
      The model and the JSON schema: docs/advise.md.

    TEXT

    def advise(argv)
      options = { interval: 5.0, max_threads: Analysis_MAX_THREADS }
      parser = OptionParser.new do |opts|
        opts.banner = ADVISE_BANNER
        opts.on("--snapshot FILE", "read a live snapshot file") { |f| options[:snapshot] = f }
        opts.on("--pid PID", Integer, "read the live socket of process PID") { |pid| options[:pid] = pid }
        opts.on("--url URL", "read a /metrics URL (Prometheus text)") { |url| options[:url] = url }
        opts.on("--interval SECONDS", Float, "time between the two live reads (default 5)") { |s| options[:interval] = s }
        opts.on("--cores N", Integer, "CPU cores the processes share (default: this machine's, #{Etc.nprocessors})") { |n| options[:cores] = n }
        opts.on("--processes N", Integer, "processes running this work now (default 1, or the workers a --url shows)") { |n| options[:processes] = n }
        opts.on("--threads REGEX", "the worker threads (default: the same-named threads, 2 or more, that held the GVL longest)") { |r| options[:threads] = r }
        opts.on("--current-threads N", Integer, "threads per process now (for --url, which has no per-thread numbers)") { |n| options[:current_threads] = n }
        opts.on("--max-wait-ms MS", Float, "the most GVL wait per request you accept (per-request numbers only)") { |ms| options[:max_wait_ms] = ms }
        opts.on("--max-threads N", Integer, "the most threads considered (default #{Analysis_MAX_THREADS})") { |n| options[:max_threads] = n }
        opts.on("--json", "print the advice as JSON (schema: docs/advise.md)") { options[:json] = true }
        opts.on("-h", "--help", "show this help") { @out.puts opts; return 0 }
      end
      paths = parser.parse(argv)
      require_relative "analysis/advisor_inputs"
      workload = advise_workload(paths, options)
      advice = Analysis::Advisor.new(workload, cores: options[:cores], processes: options[:processes],
                                               max_wait_ms: options[:max_wait_ms], max_threads: options[:max_threads]).advice
      print_out { (options[:json] ? Formats::AdviceJSON : Formats::AdviceText).new(advice).write(@out) }
      0
    end

    Analysis_MAX_THREADS = 64 # Analysis::Advisor::MAX_THREADS, without loading the analysis for --help

    def advise_workload(paths, options)
      inputs = { "FILE" => paths.first, "--snapshot" => options[:snapshot], "--pid" => options[:pid], "--url" => options[:url] }.compact
      raise UsageError, "advise needs one input: a trace FILE, --snapshot FILE, --pid PID or --url URL" if inputs.empty?
      raise UsageError, "advise takes one input, got #{inputs.keys.join(' and ')}" if inputs.size > 1 || paths.size > 1
      if options[:current_threads]&.< 1
        raise UsageError, "--current-threads must be at least 1 (got #{options[:current_threads]})"
      end

      choose = { threads: options[:threads] }
      file = options[:snapshot]
      if (path = paths.first)
        # A snapshot file given as FILE is read as one, as `diff` takes it.
        require_relative "analysis/input_kind"
        case Analysis::InputKind.of(path)
        when "trace" then return Analysis::AdvisorInputs.from_report(report_of(timeline_of(path)), **choose)
        when "snapshot" then file = path
        else
          raise Error, "#{path}: is a /metrics scrape: advise reads /metrics live, twice (--url URL --current-threads N)"
        end
      end
      if file
        require_relative "live/snapshot"
        later, earlier = Live::Snapshot.read_file(file)
        Analysis::AdvisorInputs.from_live(later, earlier, source: "snapshot #{File.basename(file)}",
                                                           current_threads: options[:current_threads], **choose)
      else
        interval = options[:interval]
        raise Error, "--interval must be more than 0 seconds (got #{interval})" unless interval.positive?

        require_relative "live"
        source = Live.source(pid: options[:pid], url: options[:url])
        what = options[:pid] ? "pid #{options[:pid]}" : options[:url]
        # Linux, a pid: the threads' run-queue wait and CPU time at both reads (docs/advise.md, "A machine short of CPU").
        schedstat = -> { options[:pid] && %i[run_queue cpu].to_h { |field| [field, Analysis::AdvisorInputs.schedstat_by_name(options[:pid], field)] } }
        begin
          earlier = source.snapshot
          before = schedstat.()
          progress("reading #{what} for #{format('%g', interval)} s")
          sleep interval
          after = schedstat.()
          later = source.snapshot
        ensure
          source.close
        end
        workload = Analysis::AdvisorInputs.from_live(later, earlier, source: what,
                                                                      current_threads: options[:current_threads], **choose)
        pool = ->(field) { before && Analysis::AdvisorInputs.pool_schedstat_ns(before[field], after[field], workload.pool_labels.to_a) }
        workload.cpu_wait_ns = pool.(:run_queue)
        workload.cpu_ns = workload.cpu_wait_ns && pool.(:cpu)
        workload
      end
    end
  end
end

