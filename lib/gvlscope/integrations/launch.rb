# frozen_string_literal: true

module GVLScope
  # The environment that has a Ruby program traced from its boot: RUBYOPT loads gvlscope/autorun
  # (integrations/autorun.rb), which reads the other variables. The one place that writes them,
  # for `gvlscope run`, `gvlscope top -- COMMAND` and the lab's runner.
  module Launch
    module_function

    LIB = File.expand_path("../..", __dir__)

    # For Process.spawn: a nil value unsets a variable the parent has, so every setting is this
    # launch's own, never one left over in the caller's environment. +load_path+: directories put
    # before lib on the load path (the lab's extension built for another Ruby).
    def environment(output: nil, run_dir: nil, load_path: [], metrics_only: false, buffer_mb: nil, stacks: true,
                    live: false, trace: true, fibers: false)
      {
        "RUBYOPT" => [ENV.fetch("RUBYOPT", nil), *load_path.map { |dir| "-I#{dir}" }, "-I#{LIB}", "-rgvlscope/autorun"]
          .compact.join(" "),
        "GVLSCOPE_OUTPUT" => output,
        "GVLSCOPE_RUN_DIR" => run_dir,
        "GVLSCOPE_METRICS_ONLY" => metrics_only ? "1" : nil,
        "GVLSCOPE_BUFFER_MB" => buffer_mb&.to_s,
        "GVLSCOPE_STACKS" => stacks ? nil : "0",
        "GVLSCOPE_FIBERS" => fibers ? "1" : nil,
        "GVLSCOPE_LIVE" => live ? "1" : nil,
        "GVLSCOPE_TRACE" => trace ? nil : "0",
      }
    end
  end
end
