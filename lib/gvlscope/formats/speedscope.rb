# frozen_string_literal: true

require "json"
require_relative "format"
require_relative "../support/vocabulary"
require_relative "../version"

module GVLScope
  module Formats
    # A trace (Model::Scan) -> speedscope's own file format (docs/format.md, "Exports and their viewers"):
    # - with stacks, first a sampled profile "holders while others waited (wait-weighted)": the
    #   holder's stack at each sample (root first), weighted by the number of threads waiting then,
    #   so speedscope's Left Heavy and Sandwich views show the code that made others wait;
    # - then one evented profile per Ruby thread, whose frames are the thread's states ("run",
    #   "wait", "idle (io/sleep)", "gc", "started"), so speedscope's Time Order view draws each
    #   thread as one row of back-to-back states. (speedscope misreads the Chrome JSON export: it
    #   adds each "X" event's ts + dur in floating point, and a slice that ends a hair after the
    #   next one begins holds every later slice inside it.)
    # - after a thread whose event loop gave its fibers turns (traces with turns, docs/fibers.md),
    #   an evented profile "<thread>: fibers": a frame "fiber N" per turn (Model::Turn), holding
    #   for a long turn the frame its fiber gave the loop back in. A profile of its own, not frames
    #   in the thread's: turns overlap its states without nesting in them, and speedscope draws an
    #   evented profile only as a stack (it warns at an overlap and nests what follows).
    #
    # Times are integer nanoseconds since the trace started: exact in speedscope's doubles.
    # "profiles" comes before "shared": frames are interned as profiles are written, so any
    # profile can bring its own frames. A frame is keyed by name, file and line: the same method
    # at two lines is two frames, as in the folded export.
    class Speedscope < Format
      SCHEMA = "https://www.speedscope.app/file-format-schema.json"

      def write(io)
        @io = io
        @out = +%({"$schema":"#{SCHEMA}","exporter":"gvlscope@#{VERSION}",) <<
                %("name":#{JSON.generate(File.basename(timeline.file.path.to_s))},"activeProfileIndex":0,"profiles":[)
        @frames = {} # [name, file, line] -> index in shared.frames
        @profiles = 0
        write_profiles
        @out << %(],\n"shared":{"frames":[) << @frames.keys.map { |key| frame_json(*key) }.join(",")
        @out << "]}}\n"
        io << @out
        io
      end

      private

      def timeline = @subject

      HOLDERS = "holders while others waited (wait-weighted)"

      def write_profiles
        write_holders_profile if timeline.stacks?
        several_ractors = timeline.ractors.size > 1
        timeline.each_thread do |thread|
          # A thread known only from the thread table has nothing to draw; an empty profile would
          # only add a blank page to speedscope's list.
          next unless timeline.drawn?(thread.serial)

          name = several_ractors ? "#{thread.display_name} (Ractor #{thread.ractor_id})" : thread.display_name
          write_streamed_profile(name, thread.serial)
          write_turns_profile("#{name}: fibers", turns_by_thread[thread.serial]) if turns_by_thread.key?(thread.serial)
        end
      end

      def turns_by_thread = @turns_by_thread ||= (timeline.respond_to?(:turns) ? timeline.turns : []).group_by(&:thread)

      # A loop's turns, back to back with the loop's own time between them: "fiber N" open for
      # each, and inside a long one the code its fiber gave the loop back in.
      def write_turns_profile(name, turns)
        begin_profile("evented", name, "events")
        @out << "\n" << turns.map do |turn|
          fiber = frame("fiber #{turn.fiber}")
          code = turn.given_back_at
          inner = code ? [frame(code.label, code.path, code.line)] : []
          [fiber, *inner].map { |index| event("O", index, turn.start_ns) }
                         .concat([*inner, fiber].map { |index| event("C", index, turn.end_ns) }).join(",")
        end.join(",\n")
        @out << "]}"
      end

      def event(type, frame, at) = %({"type":"#{type}","frame":#{frame},"at":#{at}})

      # The index of a frame in shared.frames, interned on first use.
      def frame(name, file = nil, line = nil) = @frames[[name, file, line]] ||= @frames.size

      # Line 0 is "unknown" in the model (a C method): left out, as is a C method's missing file.
      def frame_json(name, file, line)
        JSON.generate({ name: name, file: file, line: line&.positive? ? line : nil }.compact)
      end

      # Starts a profile object; the caller appends its samples or events and the closing "]}".
      def begin_profile(type, name, events_key, unit: "nanoseconds", end_value: timeline.duration_ns)
        @out << (@profiles.zero? ? "\n" : ",\n")
        @profiles += 1
        @out << %({"type":"#{type}","name":#{JSON.generate(name)},"unit":"#{unit}",) <<
          %("startValue":0,"endValue":#{end_value},"#{events_key}":[)
      end

      # The holder samples in time order, each a stack root first; weights are waiters, a count
      # and not a time ("unit": "none"). Back-to-back samples of one stack are one weighted
      # sample: a hog's thousand identical ticks are one line, and the order is kept.
      def write_holders_profile
        runs = []
        timeline.samples.each do |sample|
          last = runs.last
          # Stacks are interned by the trace reader: the same stack is the same Array.
          if last && last[0].equal?(sample.stack)
            last[1] += sample.waiters
          else
            runs << [sample.stack, sample.waiters]
          end
        end
        # An empty profile is a blank page in speedscope: none when no thread ever waited.
        return if runs.empty?

        ids = {}.compare_by_identity
        begin_profile("sampled", HOLDERS, "samples", unit: "none", end_value: runs.sum(&:last))
        @out << runs.map do |stack, _|
          ids[stack] ||= "[#{shown_stack(stack).reverse_each.map { |f| frame(f.label, f.path, f.line) }.join(',')}]"
        end.join(",")
        @out << %(],"weights":[#{runs.map(&:last).join(',')}]})
      end

      # A thread's row of back-to-back states: one open ("O") and one close ("C") event per drawn
      # interval, written by the engine (ext/gvlscope_engine/output.c), with the frames interned
      # here in the order the thread first used them.
      def write_streamed_profile(name, serial)
        begin_profile("evented", name, "events")
        frames = []
        timeline.speedscope_names(serial).each { |code, slice| frames[code] = frame(slice) }
        @io << @out
        @out.clear
        engine_write(@io, :speedscope_events, serial, frames)
        @out << "]}"
      end
    end
  end
end
