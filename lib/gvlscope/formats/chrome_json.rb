# frozen_string_literal: true

require "json"
require_relative "format"
require_relative "../support/vocabulary"
require_relative "../version"

module GVLScope
  module Formats
    # A trace (Model::Scan) -> Chrome trace event JSON (opens in the Perfetto UI and chrome://tracing; speedscope
    # nests its back-to-back slices into a staircase: formats/speedscope.rb is the file for it).
    # One process per Ractor, one track per Ruby thread, a complete event ("X") per state
    # interval, a counter of threads waiting for the GVL, and a "native threads" process showing
    # which Ruby thread each native thread ran (the M:N view). A thread whose event loop gave its
    # fibers turns (traces with turns, docs/fibers.md) has a second track, "<thread>: fibers", with
    # a complete event "fiber N" per turn (Model::Turn, as the Perfetto export draws them).
    #
    # Bytes per slice are what bound an export of 100M events (the disk's write rate): a thread's
    # slices carry no "cat" (the track says they are GVL states; only the native lanes' slices
    # have one, "native") and times drop the trailing zeros of their 3 decimals.
    #
    # The slices and the counter are written by the native engine from its copy of each thread's
    # intervals (Model::Scan's writers, ext/gvlscope_engine/output.c), streamed to the io in pieces
    # of ~1 MB: never the whole document in memory.
    class ChromeJSON < Format
      NATIVE_PID = 0
      # A loop's fibers track: a tid of its own (the JSON importers nest no track under a thread's;
      # turns overlap its GVL states, which one track would nest wrongly), clear of the serials.
      FIBERS_TID_OFFSET = 1_000_000

      def write(io)
        @io = io
        @out = +%({"displayTimeUnit":"ns","otherData":{"producer":"gvlscope #{VERSION}"},"traceEvents":[\n)
        @first = true
        pid = timeline.file.pid
        timeline.ractors.each_key do |ractor_id|
          emit(meta("process_name", ractor_pid(ractor_id), nil, ractor_id.zero? ? "pid #{pid}" : "Ractor #{ractor_id} (pid #{pid})"))
        end
        timeline.each_thread do |thread|
          rpid = ractor_pid(thread.ractor_id)
          emit(meta("thread_name", rpid, thread.serial, thread.display_name))
          write_slices(rpid, thread)
          write_turns(rpid, thread)
        end
        stream(:chrome_counter, %({"ph":"C","name":"threads waiting for the GVL","pid":#{ractor_pid(1)},"ts":))
        write_native_lanes
        @out << "\n]}\n"
        io << @out
        io
      end

      private

      def timeline = @subject

      # The engine's pieces go straight to the io, after what is buffered here. Every piece starts
      # with the ",\n" that separates it from what came before (always something: a meta event).
      def stream(writer, *arguments)
        @io << @out
        @out.clear
        @first = false
        engine_write(@io, writer, *arguments)
      end

      def ractor_pid(ractor_id) = ractor_id.zero? ? 1 : ractor_id

      def emit(line)
        @out << ",\n" unless @first
        @first = false
        @out << line
        return if @out.bytesize < FLUSH_BYTES

        @io << @out
        @out.clear
      end

      def write_slices(pid, thread) = stream(:chrome_slices, thread.serial, pid)

      # The loop's turns: "fiber N" from its start to its end, args the fiber's serial and, for a
      # long turn with a site, the code its fiber gave the loop back from (as the report names it).
      def write_turns(pid, thread)
        turns = turns_by_thread[thread.serial] or return

        tid = FIBERS_TID_OFFSET + thread.serial
        emit(meta("thread_name", pid, tid, "#{thread.display_name}: fibers"))
        turns.each do |turn|
          args = { fiber: turn.fiber }
          code = turn.given_back_label
          args[:code] = code if code
          emit(%({"ph":"X","name":"fiber #{turn.fiber}","pid":#{pid},"tid":#{tid},"ts":#{us(turn.start_ns)},) +
               %("dur":#{us(turn.duration_ns)},"args":#{JSON.generate(args)}}))
        end
      end

      def turns_by_thread = @turns_by_thread ||= (timeline.respond_to?(:turns) ? timeline.turns : []).group_by(&:thread)

      # ns as the engine writes µs: 3 decimals, without their trailing zeros.
      def us(ns)
        whole, part = ns.divmod(1000)
        part.zero? ? whole.to_s : "#{whole}.#{format('%03d', part).sub(/0+\z/, '')}"
      end

      def meta(name, pid, tid, value)
        tid_part = tid ? %(,"tid":#{tid}) : ""
        %({"ph":"M","name":"#{name}","pid":#{pid}#{tid_part},"args":{"name":#{JSON.generate(value)}}})
      end

      def write_native_lanes
        tids = timeline.file.native_tids
        return if tids.empty? || !timeline.shared_native_threads?

        emit(meta("process_name", NATIVE_PID, nil, "native threads"))
        tids.each { |serial, tid| emit(meta("thread_name", NATIVE_PID, serial, "native thread #{serial} (tid #{tid})")) }
        timeline.each_thread do |thread|
          prefix = %({"ph":"X","name":#{JSON.generate(thread.display_name)},"cat":"native","pid":#{NATIVE_PID},"tid":)
          stream(:chrome_native, thread.serial, prefix)
        end
      end
    end
  end
end
