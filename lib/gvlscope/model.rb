# frozen_string_literal: true

require_relative "errors"
require_relative "model/trace_file"
require_relative "model/gvl_tracing"
require_relative "model/timeline"
require_relative "model/scan"

module GVLScope
  # A trace becomes data: the native .gvl reader (TraceFile), the importer of gvl-tracing JSON
  # (GVLTracing), and the Timeline every analysis and format reads, in the words of Vocabulary;
  # or, for traces of any size, Scan: the native report engine's passes, which answer the same
  # questions without keeping intervals (what the CLI uses). A new importer is one file here and
  # one line in Model.read (and Scan.read).
  module Model
    module_function

    # The events of the trace at +path+, whichever tool wrote it.
    def read(path)
      GVLTracing.json?(path) ? GVLTracing.read(path) : TraceFile.read(path)
    end

    # The Timeline of the trace at +path+.
    def timeline(path) = Timeline.new(read(path))
  end
end
