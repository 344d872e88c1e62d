# frozen_string_literal: true

require_relative "support/errors"
require_relative "model/trace_file"
require_relative "model/gvl_tracing"
require_relative "model/interval"
require_relative "model/turns"
require_relative "model/scan"

module GVLScope
  # A trace becomes data: the native .gvl reader (TraceFile), the importer of gvl-tracing JSON
  # (GVLTracing), and Scan, the native report engine's passes over either: what every analysis,
  # format and command reads, in the words of Vocabulary. A new importer is one file here and one
  # line in Scan.read.
  module Model
    module_function

    # The trace at +path+ read by the engine (a Scan whose main pass ran). +bins+, +spill+,
    # +progress+: see Scan.open.
    def timeline(path, **options) = Scan.open(path, **options)
  end
end
