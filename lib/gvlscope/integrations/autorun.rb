# frozen_string_literal: true

# Loaded at boot by `gvlscope run` (through RUBYOPT=-rgvlscope/autorun): traces the whole program
# into GVLSCOPE_OUTPUT (a path; "%p" becomes the pid) and stops at exit. A forked child (Puma
# worker, fork, spawn of a Ruby with the same RUBYOPT) traces into its own file, named by its pid.
#
# The traced program's stdout and stderr are its own: under `gvlscope run` (GVLSCOPE_RUN_DIR set)
# gvlscope's words go to files in that directory, which `gvlscope run` prints after the program.
module GVLScope
  module Autorun
    module_function

    def run_dir = ENV.fetch("GVLSCOPE_RUN_DIR", nil)

    # A message for the person who ran `gvlscope run`; on stderr only without it (a plain
    # `ruby -rgvlscope/autorun`, where stderr is the only way to say it).
    def tell(text)
      return warn(text) unless run_dir

      append(File.join(run_dir, "messages"), text)
    end

    # One write(2) to an O_APPEND file: the lines of processes that finish together do not mix.
    def append(path, text)
      File.open(path, "a") { |file| file.syswrite(text.end_with?("\n") ? text : "#{text}\n") }
    rescue SystemCallError
      nil # `gvlscope run` is gone (an orphaned daemon): nobody is listening
    end
  end
end

begin
  require_relative "../../gvlscope"
  require_relative "at_exit"
rescue LoadError, StandardError => e
  # Never stop the user's program from running because tracing cannot start.
  GVLScope::Autorun.tell("gvlscope: not tracing pid #{Process.pid}: #{e.message}")
  return
end

module GVLScope
  module Autorun
    module_function

    # Where this process's trace goes: GVLSCOPE_OUTPUT with %p as the pid. The first process to
    # create the file keeps it; the others (forked children, sub-Rubies, the image after an exec,
    # all of which see the same template) get their pid, then a counter, in the name: a trace is
    # never overwritten (GVLScope.start opens with O_EXCL).
    def output_template = ENV.fetch("GVLSCOPE_OUTPUT", "gvlscope-%p.gvl")

    def output_paths
      template = output_template
      first = template.gsub("%p", Process.pid.to_s)
      own = template.include?("%p") ? first : GVLScope.suffixed_path(first, Process.pid)
      [first, own, *(2..9).map { |n| GVLScope.suffixed_path(own, n) }].uniq
    end

    # Starts the trace at the first of +paths+ not taken yet; returns that path.
    def claim(paths)
      GVLScope.start(paths.first, buffer_bytes: buffer_bytes, stacks: stacks?, fibers: fibers?)
      paths.first
    rescue Errno::EEXIST
      raise if paths.size == 1

      claim(paths.drop(1))
    end

    def metrics_only? = ENV["GVLSCOPE_METRICS_ONLY"] == "1"

    # GVLSCOPE_BUFFER_MB (`gvlscope run --buffer MB`): memory for events not yet written. Each
    # native thread that records holds a 64 KiB chunk, so thousands of threads need more than the
    # default 64 MiB (about 1,000 threads) or their events are dropped.
    def buffer_bytes
      megabytes = Integer(ENV.fetch("GVLSCOPE_BUFFER_MB", GVLScope::DEFAULT_BUFFER_BYTES >> 20), exception: false)
      megabytes&.positive? ? megabytes << 20 : GVLScope::DEFAULT_BUFFER_BYTES
    end

    # GVLSCOPE_STACKS=0 (`gvlscope run --no-stacks`): no code locations in the trace.
    def stacks? = ENV["GVLSCOPE_STACKS"] != "0"

    # GVLSCOPE_FIBERS=1 (`gvlscope run --fibers`): event loops' turns in the trace from the start
    # (without it, from GVLScope::Rack's first request on a loop's task).
    def fibers? = ENV["GVLSCOPE_FIBERS"] == "1" || nil

    # GVLSCOPE_LIVE=1 (`gvlscope run --live`, `gvlscope top -- COMMAND`): each process also opens
    # its live socket (integrations/live_server.rb) for `gvlscope top PID`.
    def live? = ENV["GVLSCOPE_LIVE"] == "1"

    # GVLSCOPE_TRACE=0 (`gvlscope top -- COMMAND` without --trace): no trace file.
    def trace? = ENV["GVLSCOPE_TRACE"] != "0"

    def start
      start_live if live?
      return start_metrics if metrics_only?
      return unless trace?

      listed(start_trace)
    end

    # Listed at start, not at stop: a process that ends by exit! or a signal leaves a trace too.
    def listed(path)
      append(File.join(run_dir, "traces"), path) if run_dir && path
    end

    # The trace of this process; returns its path, or nil (told why).
    def start_trace
      path = claim(output_paths)
      GVLScope::AtExit.after_other_threads { stop }
      path
    rescue SystemCallError, GVLScope::Error => e
      tell("gvlscope: not tracing pid #{Process.pid}: #{e.message}")
      nil
    end

    # Process.daemon: the process `gvlscope run` waits for leaves by _exit (no at_exit) and the
    # program goes on in a daemon it cannot report. So the trace ends here, complete, and the
    # daemon traces into a file of its own; said before the fork, while `gvlscope run` listens.
    def before_daemon
      @tracing_before_daemon = trace? && !metrics_only? && GVLScope.tracing?
      return unless @tracing_before_daemon

      stop
      tell("gvlscope: pid #{Process.pid} calls Process.daemon: its trace ends here; the daemon is traced into " \
           "its own file (#{File.basename(output_template)} with the daemon's pid), to read once it exits")
    end

    # In the daemon: its own trace, as a forked child's (not listed: `gvlscope run` has reported
    # by then). Its live socket is live_server.rb's (LiveDaemonHook).
    def start_in_daemon = (start_trace if @tracing_before_daemon)

    # exec: this image's trace ends here, complete (the new image, a Ruby with the same RUBYOPT,
    # starts its own: the same name with "-2", or "-<pid>" with an -o without %p).
    def before_exec
      @tracing_before_exec = trace? && !metrics_only? && GVLScope.tracing?
      stop if @tracing_before_exec
    end

    # The exec failed and the program goes on: so does its trace, in the next free name.
    def after_failed_exec = (listed(start_trace) if @tracing_before_exec)

    # Opens the live socket; under `gvlscope run`/`top` its pid and path go to RUN_DIR/live, where
    # they learn which process to read.
    def start_live
      require_relative "live_server"
      server = GVLScope::LiveServer.start
      append(File.join(run_dir, "live"), "#{Process.pid} #{server.path}") if run_dir
    rescue SystemCallError, GVLScope::Error => e
      tell("gvlscope: no live socket for pid #{Process.pid}: #{e.message}")
    end

    # `gvlscope run --metrics-only`: no trace, the metrics of the whole process at its exit.
    def start_metrics
      GVLScope::Metrics.enable
      GVLScope::AtExit.after_other_threads do
        tell("gvlscope: GVL metrics of pid #{Process.pid} (#{$PROGRAM_NAME})\n#{GVLScope::Metrics.snapshot}")
      end
    end

    # At exit, after the program's other threads are gone (GVLScope::AtExit): the stop waits for
    # the writer thread, and they must not run meanwhile.
    def stop
      return unless GVLScope.tracing?

      # Metrics off first (nothing reads them once the threads are gone): with them on, the stop
      # would enable the recorder's GC TracePoint again after Ruby cleared every TracePoint at the
      # end of at_exit, and Ruby 3.4 fires it into its freed object as it frees all at exit ([BUG]).
      GVLScope::Metrics.disable if GVLScope::Metrics.enabled?
      summary = GVLScope.stop
      tell("gvlscope: #{summary}") if summary.dropped.positive? || summary.write_error
      if summary.dropped.positive? && !summary.write_error
        tell("gvlscope: to keep them, give the recorder more memory: gvlscope run --buffer MB (now " \
             "#{buffer_bytes >> 20} MB; each recording native thread holds 64 KiB)")
      end
    end
  end
end

GVLScope.after_fork { GVLScope::Autorun.start }
GVLScope.before_daemon { GVLScope::Autorun.before_daemon }
GVLScope.after_daemon { GVLScope::Autorun.start_in_daemon }
GVLScope.before_exec { GVLScope::Autorun.before_exec }
GVLScope.after_failed_exec { GVLScope::Autorun.after_failed_exec }
GVLScope::Autorun.start
