# frozen_string_literal: true

require "optparse"
require "tmpdir"
require "tempfile"
require_relative "../support/errors"
require_relative "../support/printable"
require_relative "../support/output_file"
require_relative "../live"
require_relative "../formats/top_text"
require_relative "code_reader"
require_relative "../integrations/launch"

module GVLScope
  # `gvlscope top`: the GVL of a running process, refreshed every interval.
  module Top
    # Sources: `-- COMMAND` (started here with its live socket on), PID (a process whose live
    # socket is open), --url (the Puma plugin's /metrics). The interactive view needs a terminal
    # on stdout; otherwise (a pipe, a file, --once) frames are printed as plain text.
    class CLI
      BANNER = <<~TEXT
        Usage: gvlscope top [options] PID
               gvlscope top [options] --url http://127.0.0.1:9394/metrics
               gvlscope top [options] -- COMMAND [ARGS...]

        What the GVL does in a running Ruby process, refreshed every interval: GVL held %, wait per
        second, waiting threads, each thread's run / wait / idle, the top holders and waiters (with
        code locations when the process writes a trace with stacks) and findings as they appear.

        PID: a process that opened its live socket (GVLSCOPE_LIVE=1 with -rgvlscope/autorun,
        gvlscope run --live, or the Puma plugin's live: true); only its own user may read it.
        -- COMMAND: runs COMMAND with its live socket on (its output goes to a log file, named at
        the end) and exits with its status when it ends; q ends it (TERM).
        Keys: q quit, s sort (wait, run, idle, name), p pause.

      TEXT
      PROGRAM_STOP_GRACE = 5.0
      # Bad usage: printed with the usage, exit 2.
      class CLIUsage < StandardError; end # seconds between TERM and KILL when q ends the program top started

      def initialize(out:, err:)
        @out = out
        @err = err
        @interval = 1.0
        @once = false
        @json = false
        @url = nil
        @trace = nil
        @log = nil
        @force = false
        @sort = Formats::TopText::SORTS.first
        @paused = false
        @findings = []
        @seen = {}
        @codes = CodeReader.new
        @samples = Hash.new { |hash, serial| hash[serial] = [] }
        @frames = 0 # frames made so far
      end

      # Returns the exit status: 0, 1 (GVLScope::Error, raised to the main CLI), 2 (bad usage), or
      # with -- COMMAND the program's own.
      def run(argv)
        parser = options
        catch(:help) { return start(parser, argv) }
        0
      rescue CLIUsage, OptionParser::ParseError => e
        @err.puts "gvlscope top: #{Printable.message(e.message)} (see gvlscope top --help)"
        2
      end

      private

      def start(parser, argv)
        # Everything after the first `--` is the program's, options included.
        split = argv.index("--")
        command = split && argv[(split + 1)..]
        rest = parser.parse(split ? argv[0...split] : argv)

        choose_source(command, rest)
        raise CLIUsage, "--json goes with --once (one snapshot, as JSON)" if @json && !@once
        raise CLIUsage, "--trace goes with -- COMMAND" if @trace && !command
        check_outputs if command

        command ? watch_program(command) : watch(Live.source(pid: @pid, url: @url), target_name)
      end

      def options
        OptionParser.new do |opts|
          opts.banner = BANNER
          opts.on("--url URL", "read the Puma plugin's /metrics endpoint instead of a live socket") { |url| @url = url }
          opts.on("-n", "--interval SECONDS", Float, "refresh every SECONDS (default 1.0)") do |seconds|
            raise CLIUsage, "--interval must be between 0.1 and 3600 seconds, got #{seconds}" unless seconds.between?(0.1, 3600)

            @interval = seconds
          end
          opts.on("--once", "print one frame (the first interval) as plain text and exit") { @once = true }
          opts.on("--json", "with --once: print the interval as a Live::Snapshot JSON (gvlscope advise reads it)") { @json = true }
          opts.on("--trace PATH", "with -- COMMAND: also trace it with stacks into PATH, for code locations") { |path| @trace = path }
          opts.on("--log PATH", "with -- COMMAND: where its stdout and stderr go (default: a file in the temp dir)") do |path|
            @log = path
          end
          opts.on("--force", "replace the --log file if it exists (a --trace file is never replaced)") { @force = true }
          opts.on("-h", "--help", "show this help") do
            @out.puts opts
            throw :help
          end
        end
      end

      def choose_source(command, rest)
        given = [command ? "-- COMMAND" : nil, @url ? "--url" : nil, rest.empty? || command ? nil : "PID"].compact
        raise CLIUsage, "top needs one of PID, --url URL or -- COMMAND" if given.empty?
        raise CLIUsage, "top takes one of PID, --url or -- COMMAND (got #{given.join(' and ')})" if given.size > 1
        raise CLIUsage, "top takes one PID (got #{rest.join(' ')})" if !command && rest.size > 1
        raise CLIUsage, "-- needs a COMMAND" if command&.empty?
        return if command || @url

        @pid = Integer(rest.first, exception: false)
        raise CLIUsage, "not a process id: #{rest.first}" unless @pid&.positive?
      end

      def target_name
        return @url if @url

        command = begin
          File.binread("/proc/#{@pid}/cmdline").split("\0").join(" ")
        rescue SystemCallError
          ""
        end
        command.empty? ? "pid #{@pid}" : "pid #{@pid} (#{command[0, 40]})"
      end

      # Watches +source+ until the process ends or q; returns the exit status.
      def watch(source, name, program: nil)
        previous = begin
          source.snapshot(stacks: true)
        rescue Error => e
          raise unless program

          return unread(program, e)
        end
        view = @once || !@out.tty? ? nil : Screen.open(@err)
        frame = nil
        deadline = now
        begin
          loop do
            # On a fixed grid: a slow answer (the target's live thread waits for the GVL like any
            # other) does not stretch the refresh period.
            deadline += @interval
            deadline = now + @interval if deadline < now
            frame = draw_waiting(view, name) if frame.nil? && view
            wait_until(deadline, view) { frame && redraw(view, frame) } or return stop_program(program)
            if program&.call(:ended?)
              view&.close # finished's line goes to the terminal the view had
              return finished(program)
            end

            current = begin
              source.snapshot(stacks: true)
            rescue Error => e
              view&.close # the line unread says goes to the terminal the view had
              return unread(program, e) if program
              raise unless gone?(source)

              return finished(program, name)
            end
            frame = frame_of(current - previous, name, keys: !view.nil?)
            previous = current
            if view
              redraw(view, frame) unless @paused
            else
              print_frame(frame)
              return @once && program ? finished(program, wait: true) : 0 if @once
            end
          end
        rescue Interrupt # Ctrl-C while reading: the same as q
          stop_program(program)
        ensure
          view&.close
          source.close
        end
      end

      def now = Process.clock_gettime(Process::CLOCK_MONOTONIC)

      # Handles keys until +deadline+; false when the user quits. Without a view, sleeps.
      def wait_until(deadline, view)
        unless view
          # Until the deadline: a sleep may end early (another thread's wakeup, a signal's handler),
          # and an interval shorter than asked would be read as that long.
          sleep(deadline - now) while now < deadline
          return true
        end
        while now < deadline
          case view.key
          when "q", "Q" then return false
          when "s", "S"
            sorts = Formats::TopText::SORTS
            @sort = sorts[(sorts.index(@sort) + 1) % sorts.size]
            yield
          when "p", "P"
            @paused = !@paused
            yield
          when :resize then yield
          end
        end
        true
      rescue Interrupt
        false
      end

      def frame_of(interval, name, keys:)
        @frames += 1
        interval = with_code(interval)
        clock = Time.now.strftime("%H:%M:%S")
        interval.findings.each do |finding|
          key = [finding["kind"], finding["holder"] || finding["thread"]] # a convoy is its holder's, whoever waits
          if (index = @seen[key])
            @findings[index] = [@findings[index][0], finding] # still there: the newest numbers
          else
            @seen[key] = @findings.size
            @findings << [clock, finding]
          end
        end
        Formats::TopText::Frame.new(snapshot: interval, target: name, sort: @sort, paused: @paused, findings: @findings,
                                    keys: keys, note: @codes.note, clock: clock)
      end

      SAMPLES = 10 # where a thread was at the last SAMPLES refreshes: the most frequent place is shown

      # The interval's thread rows with their code: where each thread was most often at the last
      # refreshes ("at", sampled by the live socket), and, when the target writes a trace with
      # stacks, the code it held the GVL in and the call it released it at.
      def with_code(interval)
        path = interval.trace_path
        traced = path && File.readable?(path) ? @codes.codes(path) : {}
        rows = interval.threads.map do |row|
          code = {}
          if (at = row.code && row.code["at"])
            seen = (@samples[row.serial] << at).last(SAMPLES)
            @samples[row.serial] = seen
            place, count = seen.tally.max_by { |_, n| n }
            code["at"] = seen.size > 1 ? "#{place} #{count}/#{seen.size}" : place
          end
          code.merge!(traced.fetch(row.serial, {}))
          code.empty? ? row : row.dup.tap { |copy| copy.code = code }.freeze
        end
        interval.with(threads: rows)
      end

      def redraw(view, frame)
        frame.sort = @sort
        frame.paused = @paused
        frame.width = view.width
        view.draw(Formats::TopText.new(frame).to_s.lines(chomp: true))
      end

      def draw_waiting(view, name)
        view.draw(["gvlscope top · #{name}", "", "first interval in #{@interval} s..."])
        nil
      end

      def print_frame(frame)
        if @json
          @out.puts frame.snapshot.to_json
        else
          @out.print Formats::TopText.new(frame).to_s
          @out.puts unless @once
        end
        @out.flush
      end

      def gone?(source)
        pid = source.respond_to?(:pid) && source.pid
        return false unless pid

        Process.kill(0, pid)
        false
      rescue Errno::ESRCH
        true
      rescue Errno::EPERM
        false
      end

      # The watched process ended (PID source: exit 0 after saying so; a program: its status,
      # and why no frame came if none did).
      def finished(program, name = nil, wait: false)
        if program
          @err.puts "gvlscope: the program ended before the first frame (interval #{@interval} s)" if @frames.zero?
          return program.call(wait ? :wait : :status)
        end

        @err.puts "gvlscope: #{name} ended"
        0
      end

      ENDING_GRACE = 1.0 # seconds for a program whose socket went (at its exit) to be reaped

      # The program's live socket did not answer (+error+): the program ended or is ending (its
      # socket goes at exit), or it broke its socket. Either way top's status is the program's,
      # and one line says why no (more) frames come.
      def unread(program, error)
        deadline = now + ENDING_GRACE
        sleep 0.05 until program.call(:ended?) || now > deadline
        return finished(program) if program.call(:ended?)

        @err.puts "gvlscope: #{error.message}: no more frames; top exits with the program's status when it ends"
        program.call(:wait)
      end

      def stop_program(program)
        program ? program.call(:stop) : 0
      end

      # --- -- COMMAND ---------------------------------------------------------------------------

      def watch_program(command)
        Dir.mktmpdir("gvlscope-top") do |run_dir|
          log = open_log
          begin
            pid = spawn_program(command, run_dir, log)
            program = program_control(pid)
            status = begin
              source = wait_for_socket(pid, run_dir, program)
              title = "pid #{source&.pid} (#{Printable.text(command.join(' ')[0, 40])})"
              source ? watch(source, title, program: program) : program.call(:wait)
            rescue Interrupt
              program.call(:stop)
            ensure
              program.call(:stop) unless program.call(:ended?)
            end
            messages = File.join(run_dir, "messages")
            @err.print File.read(messages) if File.exist?(messages)
            status
          ensure
            log.close
            tell_log(log.path)
          end
        end
      end

      # Before the program starts: --log under OutputFile's rule; --trace, which the recorder
      # creates (O_EXCL) as the program runs, must not exist (as `gvlscope run -o`).
      def check_outputs
        if @trace && OutputFile.taken?(@trace)
          raise Error, "#{@trace} already exists (a trace never overwrites a file): remove it or choose another --trace"
        end
        OutputFile.check!(@log, inputs: [@trace], force: @force, option: "--log") if @log
      end

      # Where the program's output goes: --log PATH (a new file, OutputFile.create: it can be
      # followed as it grows), else a new file of a name nobody can guess (Tempfile: O_EXCL,
      # 0600), so that no link planted in the temp dir is followed.
      def open_log
        return Tempfile.create(["gvlscope-top-", ".log"]) unless @log

        OutputFile.create(@log, inputs: [@trace], force: @force, option: "--log")
      end

      def spawn_program(command, run_dir, log)
        env = Launch.environment(output: @trace && File.expand_path(@trace), run_dir: run_dir, live: true, trace: !@trace.nil?)
        # Its own process group: the terminal's Ctrl-C reaches top, which ends the program itself.
        Process.spawn(env, *command, in: File::NULL, out: log, err: [:child, :out], pgroup: true)
      rescue SystemCallError => e
        raise Error, "cannot run #{command.first}: #{e.message}"
      end

      # A lambda answering :ended?, :status (after it ended), :wait and :stop (TERM, then KILL).
      def program_control(pid)
        status = nil
        reap = ->(flags) { status ||= Process.wait2(pid, flags)&.last }
        exit_code = -> { status.exitstatus || 128 + status.termsig.to_i }
        lambda do |what|
          case what
          when :ended? then !reap.call(Process::WNOHANG).nil?
          when :status, :wait
            reap.call(0)
            exit_code.call
          when :stop
            unless reap.call(Process::WNOHANG)
              signal(pid, "TERM")
              deadline = now + PROGRAM_STOP_GRACE
              sleep 0.05 until reap.call(Process::WNOHANG) || now > deadline
              signal(pid, "KILL") unless status
              reap.call(0)
            end
            exit_code.call
          end
        end
      end

      def signal(pid, name)
        Process.kill(name, -pid) # the whole group: a shell's children too
      rescue Errno::ESRCH, Errno::EPERM
        nil
      end

      # The first live socket the program's processes opened (the program itself first); nil if
      # it ended without one.
      def wait_for_socket(pid, run_dir, program)
        path = File.join(run_dir, "live")
        loop do
          entries = File.exist?(path) ? File.readlines(path, chomp: true).map(&:split) : []
          chosen = entries.find { |entry_pid, _| entry_pid.to_i == pid } || entries.first
          return Live::Client.new(chosen[1], pid: chosen[0].to_i) if chosen && File.socket?(chosen[1])
          if program.call(:ended?)
            @err.puts "gvlscope: the program ended before it opened its live socket (is it a Ruby >= 3.3 program?)"
            return nil
          end

          sleep 0.05
        end
      end

      def tell_log(log)
        if File.size?(log)
          @err.puts "gvlscope: the program's output is in #{log}"
        elsif File.exist?(log) && !@log
          File.unlink(log)
        end
      end
    end
  end
end

require_relative "screen"
