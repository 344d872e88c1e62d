# frozen_string_literal: true

# Loaded at boot by `gvlscope run` (through RUBYOPT=-rgvlscope/autorun): traces the whole program
# into GVLSCOPE_OUTPUT (a path; "%p" becomes the pid) and stops at exit. A forked child (Puma
# worker, fork, spawn of a Ruby with the same RUBYOPT) traces into its own file, named by its pid.
begin
  require_relative "../../gvlscope"
rescue LoadError, StandardError => e
  # Never stop the user's program from running because tracing cannot start.
  warn "gvlscope: not tracing this process: #{e.message}"
  return
end

module GVLScope
  module Autorun
    module_function

    def output_path
      template = ENV.fetch("GVLSCOPE_OUTPUT", "gvlscope-%p.gvl")
      template = template.sub(/(\.gvl)?\z/, "-%p\\1") if Process.pid != Integer(ENV.fetch("GVLSCOPE_PARENT_PID", Process.pid)) && !template.include?("%p")
      template.gsub("%p", Process.pid.to_s)
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

    def start
      return start_metrics if metrics_only?

      GVLScope.start(output_path, buffer_bytes: buffer_bytes, stacks: stacks?)
      at_exit { stop }
    rescue SystemCallError, GVLScope::Error => e
      warn "gvlscope: not tracing: #{e.message}"
    end

    # `gvlscope run --metrics-only`: no trace, the metrics of the whole process at its exit.
    def start_metrics
      GVLScope::Metrics.enable
      at_exit do
        $stderr.puts "gvlscope: GVL metrics of pid #{Process.pid} (#{$PROGRAM_NAME})", GVLScope::Metrics.snapshot.to_s
      end
    end

    def stop
      return unless GVLScope.tracing?

      summary = GVLScope.stop
      File.open(ENV["GVLSCOPE_SUMMARY_LIST"], "a") { |f| f.puts(summary.path) } if ENV["GVLSCOPE_SUMMARY_LIST"]
      warn "gvlscope: #{summary}" if summary.dropped.positive? || summary.write_error
      if summary.dropped.positive? && !summary.write_error
        warn "gvlscope: to keep them, give the recorder more memory: gvlscope run --buffer MB (now " \
             "#{buffer_bytes >> 20} MB; each recording native thread holds 64 KiB)"
      end
    end
  end
end

GVLScope.after_fork { GVLScope::Autorun.start }
GVLScope::Autorun.start
