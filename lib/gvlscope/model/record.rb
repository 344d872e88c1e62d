# frozen_string_literal: true

require_relative "engine_library"

module GVLScope
  module Model
    # An event record of a .gvl trace: 8 bytes, the kind in the low KIND_BITS, then the Ruby
    # thread's serial or an ARG's value (VALUE_BITS), then the time since its chunk's base_ns
    # (from DELTA_SHIFT). The layout is ext/gvlscope/format.h's, as the report engine's extension
    # exports it (GVLScope::Engine::RECORD_*): every Ruby reader and writer of records (TraceFile,
    # GvlWriter, the tests' trace writers) builds and reads them here. The kinds' numbers are
    # Vocabulary::EVENT_KINDS (test/engine/numbering_test.rb).
    #
    # Loaded on first use (autoload, in the files that use it): it loads the engine's extension,
    # which commands that read no trace (run, top) must not need.
    module Record
      Model.load_engine_library
      KIND_BITS = Engine::RECORD_KIND_BITS
      VALUE_BITS = Engine::RECORD_THREAD_BITS
      DELTA_SHIFT = Engine::RECORD_DELTA_SHIFT
      MAX_KIND = (1 << KIND_BITS) - 1
      MAX_VALUE = Engine::MAX_THREAD_SERIAL # the largest thread serial or ARG value
      MAX_DELTA = Engine::RECORD_MAX_DELTA
      KIND_AND_VALUE = (1 << DELTA_SHIFT) - 1 # the bits below the delta

      module_function

      # A record of +kind+ (0..MAX_KIND), +value+ (0..MAX_VALUE) and +delta+ ns (0..MAX_DELTA);
      # what lies outside its field spoils the next one, as the C writer's gvls_record would.
      def pack(kind, value, delta) = kind | value << KIND_BITS | delta << DELTA_SHIFT

      def kind(record) = record & MAX_KIND
      def value(record) = (record >> KIND_BITS) & MAX_VALUE
      def delta(record) = record >> DELTA_SHIFT

      # TraceFile's "meta" of an event: its record with the serial of its native thread (of any
      # size) in place of its delta, so one Integer carries what the sort must keep with the time.
      # Record.kind and Record.value read it as they read a record.
      def meta(record, native) = (record & KIND_AND_VALUE) | native << DELTA_SHIFT
      def meta_native(meta) = meta >> DELTA_SHIFT
    end
  end
end
