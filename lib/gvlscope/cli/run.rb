# frozen_string_literal: true

require "optparse"
require_relative "../support/errors"
require_relative "../support/printable"
require_relative "../support/output_file"
require_relative "../formats"
require_relative "../integrations/launch"

module GVLScope
  class CLI
    # `gvlscope run`: the program started with the recorder loaded at boot, supervised (signals
    # passed on, its exit status and death by signal passed back), then its traces summarised,
    # reported or exported. CLI's methods for it (CLI includes this: its output, its progress bar,
    # its readers and writers of traces).
    module Run
      private

      # Runs COMMAND with the recorder loaded at boot through RUBYOPT, so any Ruby it starts (and
      # every forked child) writes a trace; the program's output and exit status pass through.
      def run_command(argv)
        output = nil
        show_summary = true
        html = nil
        export_format = nil
        metrics_only = false
        buffer_mb = nil
        stacks = true
        fibers = false
        live = false
        force = false
        parser = OptionParser.new do |opts|
          opts.banner = "Usage: gvlscope run [options] -- COMMAND [ARGS...]\n\n" \
                        "Runs COMMAND with the recorder loaded at boot (RUBYOPT): every Ruby process it starts writes\n" \
                        "a trace. Output, exit status and signals (TERM, INT, HUP, QUIT, USR1, USR2 sent to gvlscope run)\n" \
                        "pass through; a summary goes to stderr at the end.\n\n"
          opts.on("-o", "--output PATH", "trace file (default gvlscope-<pid>.gvl; %p = pid)") { |o| output = o }
          opts.on("--no-report", "--no-summary", "print nothing at exit unless something went wrong") { show_summary = false }
          opts.on("--html PATH", "also write the HTML report of the first trace") { |o| html = o }
          opts.on("--format FORMAT", EXPORT_FORMATS, "also export each trace (#{EXPORT_FORMATS.join(', ')})") { |f| export_format = f }
          opts.on("--force", "replace the --html and --format files if they exist (a trace, -o, is never replaced)") { force = true }
          opts.on("--metrics-only", "no trace: print GVL metrics of each process at its exit") { metrics_only = true }
          opts.on("--no-stacks", "do not record code locations (release sites, holder stacks while threads wait)") { stacks = false }
          opts.on("--fibers", "record event loops' turns (Fiber scheduler threads: Falcon, async) from the start") { fibers = true }
          opts.on("--live", "each process also opens its live socket for `gvlscope top PID` (pids printed as they start)") do
            live = true
          end
          opts.on("--buffer MB", Integer, "recorder memory per process (default 64; each native thread holds 64 KiB)") do |mb|
            raise UsageError, "--buffer must be at least 1 (MB)" unless mb.positive?

            buffer_mb = mb
          end
          opts.on("-h", "--help", "show this help") { @out.puts opts; return 0 }
        end
        command = parser.order(argv)
        command.shift if command.first == "--"
        raise UsageError, "run needs a COMMAND (gvlscope run -- ruby app.rb)" if command.empty?
        if metrics_only && (html || export_format || output)
          raise UsageError, "--metrics-only writes no trace: it cannot go with -o, --html or --format"
        end
        # Checked before the program runs: folded stacks of a trace without stacks fail only after it.
        if export_format && !stacks && Formats.fetch(export_format, command: "export").stacks
          raise UsageError, "--format #{export_format} needs stacks: it cannot go with --no-stacks"
        end

        output = File.expand_path(output || "gvlscope-%p.gvl")
        if !output.include?("%p") && OutputFile.taken?(output)
          # The recorder creates it (O_EXCL) as the program runs: no --force can make that a replacement.
          raise Error, "#{output} already exists (a trace never overwrites a file): remove it or choose another -o"
        end
        # Before the program runs, not after it: the trace is the page's input (and the export's,
        # at a path known now unless the name has the pid in it).
        OutputFile.check!(html, inputs: [output], force: force, option: "--html") if html
        export_output(output, export_format, nil, force: force) if export_format && !output.include?("%p")

        require "tmpdir"
        # A private directory for what the traced processes tell us: their traces and messages.
        Dir.mktmpdir("gvlscope-run") do |run_dir|
          announcer = announce_live(run_dir) if live
          status = spawn_traced(command, run_dir, output: output, metrics_only: metrics_only, buffer_mb: buffer_mb,
                                                     stacks: stacks, fibers: fibers, live: live)
          announcer&.call
          messages = File.join(run_dir, "messages")
          @err.print File.read(messages) if File.exist?(messages)
          traces = File.exist?(File.join(run_dir, "traces")) ? File.readlines(File.join(run_dir, "traces"), chomp: true) : []
          with_progress { after_run(traces, show_summary: show_summary, html: html, export_format: export_format, force: force) } unless metrics_only
          @signal = status.termsig
          status.exitstatus || 128 + status.termsig.to_i
        end
      end

      def spawn_traced(command, run_dir, output:, metrics_only:, buffer_mb:, stacks:, fibers: false, live: false)
        env = Launch.environment(output: output, run_dir: run_dir, metrics_only: metrics_only, buffer_mb: buffer_mb,
                                 stacks: stacks, fibers: fibers, live: live)
        forwarding = forward_signals
        pid = begin
          Process.spawn(env, *command)
        rescue SystemCallError => e
          raise Error, "cannot run #{command.first}: #{e.message}"
        end
        forwarding.call(pid)
        _, status = Process.wait2(pid)
        status
      ensure
        forwarding&.call(nil)
      end

      # `gvlscope run --live`: tells, as each traced process opens its live socket, the command that
      # reads it (once per pid: a process that execs itself opens it again). Returns a lambda that
      # stops watching.
      def announce_live(run_dir)
        path = File.join(run_dir, "live")
        told = {}
        watcher = Thread.new do
          loop do
            lines = File.exist?(path) ? File.readlines(path, chomp: true) : []
            lines.map { |line| line.split.first }.uniq.each do |pid|
              @err.puts "gvlscope: pid #{pid} is live: gvlscope top #{pid}" unless told[pid]
              told[pid] = true
            end
            sleep 0.2
          end
        end
        -> { watcher.kill.join }
      end

      # What a supervisor (docker, systemd, foreman, a CI runner) sends to the process it started
      # must reach the program: gvlscope run passes these on and goes on waiting for it.
      FORWARDED_SIGNALS = %w[TERM INT HUP QUIT USR1 USR2].freeze
      # Sent by a terminal to its whole foreground process group, the program included.
      TERMINAL_SIGNALS = %w[INT QUIT HUP].freeze

      # Installs the forwarding traps (before the spawn: a signal that comes first is passed on as
      # soon as the program exists); returns a lambda that takes the program's pid, or nil once it
      # has been waited for, which restores the previous handlers.
      # A signal gvlscope run inherited as ignored (nohup's HUP, INT and QUIT of a script's background
      # job) stays ignored and is not forwarded: a handler of ours would not survive the exec, and
      # the program would start with the default action (death) where it would have ignored it.
      def forward_signals
        child = nil
        pending = []
        ignored = []
        previous = FORWARDED_SIGNALS.to_h do |name|
          handler = trap(name) do
            next if ignored.include?(name) # in the instant before it was ignored again: ignored
            next if TERMINAL_SIGNALS.include?(name) && terminal_foreground? # the program got it too

            child ? Process.kill(name, child) : pending << name
          rescue Errno::ESRCH
            nil # the program is exiting
          end
          if handler == "IGNORE"
            ignored << name
            trap(name, "IGNORE")
          end
          [name, handler]
        end
        lambda do |pid|
          child = pid
          if pid
            pending.each { |name| Process.kill(name, pid) }
          else
            previous.each { |name, handler| trap(name, handler) }
          end
        end
      end

      # True when gvlscope run is in the foreground process group of its terminal (Linux:
      # /proc/self/stat's tpgid is our group), where Ctrl-C and a hangup reach the program directly:
      # passing them on would deliver them twice.
      def terminal_foreground?
        fields = File.read("/proc/self/stat").split(")").last.split # state ppid pgrp session tty_nr tpgid
        Integer(fields[5]) == Process.getpgrp
      rescue SystemCallError, ArgumentError, TypeError
        $stdin.tty?
      end

      # --no-report: nothing is printed unless something went wrong (the program's stderr is then
      # exactly its own).
      def after_run(traces, show_summary:, html:, export_format:, force:)
        if traces.empty?
          @err.puts "gvlscope: no trace was written (was COMMAND a Ruby >= 3.3 program?)"
          return
        end
        require_relative "../model"
        return traces.each { |path| tell_trace_problems(path) } unless show_summary || html || export_format

        traces.each_with_index do |path, index|
          require_relative "../analysis/overview"
          bins = (Analysis::Overview::BINS if html && index.zero?)
          timeline = timeline_of(path, bins: bins, spill: !export_format.nil?, checked: false)
          report = report_of(timeline) if show_summary || (html && index.zero?)
          if show_summary
            say Formats::ReportText.new(report).short
            say ""
          end
          write_html(report, html, input: path, force: force) if html && index.zero?
          export_timeline(timeline, path, export_format, force: force) if export_format
        end
        return unless show_summary

        say "gvlscope: #{traces.size == 1 ? 'trace' : "#{traces.size} traces (one per process)"}: " \
            "#{traces.join(', ')}; full report: gvlscope report #{traces.first}"
      end

      # --no-report: what went wrong with a trace, from its framing only (TraceFile.index: header,
      # chunk headers, thread table, end record; not one event). Dropped events the process said
      # itself. A trace without its end record is not told: a program that ends with exit! (a forked
      # child's usual end) or is killed writes none, and run's stderr is then the program's own.
      def tell_trace_problems(path)
        Model::TraceFile.index(path).warnings.each { |warning| say "gvlscope: warning: #{Printable.message(warning)}" }
      rescue Error => e
        say "gvlscope: warning: #{Printable.message(e.message)}"
      end
    end
  end
end
