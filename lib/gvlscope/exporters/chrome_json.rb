# frozen_string_literal: true

require "json"

module GVLScope
  module Exporters
    # Timeline -> Chrome trace event JSON (opens in the Perfetto UI, chrome://tracing, speedscope).
    # One process per Ractor, one track per Ruby thread, a complete event ("X") per state
    # interval, a counter of threads wanting the GVL, and a "native threads" process showing
    # which Ruby thread each native thread ran (the M:N view).
    class ChromeJSON
      NATIVE_PID = 0

      def initialize(timeline)
        @timeline = timeline
      end

      def write(io)
        io << %({"displayTimeUnit":"ns","otherData":{"producer":"gvlscope #{VERSION}"},"traceEvents":[\n)
        first = true
        emit = lambda do |line|
          io << ",\n" unless first
          first = false
          io << line
        end
        pid = @timeline.file.pid
        @timeline.ractors.each_key do |ractor_id|
          emit.(meta("process_name", ractor_pid(ractor_id), nil, ractor_id.zero? ? "pid #{pid}" : "Ractor #{ractor_id} (pid #{pid})"))
        end
        @timeline.each_thread do |thread|
          rpid = ractor_pid(thread.ractor_id)
          emit.(meta("thread_name", rpid, thread.serial, thread.label))
          thread.intervals.each { |interval| emit.(slice(rpid, thread.serial, interval)) }
        end
        @timeline.waiting_counter.each do |time, count|
          emit.(%({"ph":"C","name":"threads wanting the GVL","pid":#{ractor_pid(1)},"ts":#{us(time)},"args":{"threads":#{count}}}))
        end
        write_native_lanes(emit)
        io << "\n]}\n"
        io
      end

      def self.state_name(interval)
        case interval.state
        when :waiting then "waiting (#{interval.detail.to_s.tr("_", "/")})"
        else interval.state.to_s
        end
      end

      private

      def ractor_pid(ractor_id) = ractor_id.zero? ? 1 : ractor_id

      def us(ns) = format("%.3f", ns / 1000.0)

      def meta(name, pid, tid, value)
        tid_part = tid ? %(,"tid":#{tid}) : ""
        %({"ph":"M","name":"#{name}","pid":#{pid}#{tid_part},"args":{"name":#{JSON.generate(value)}}})
      end

      def slice(pid, tid, interval)
        args = interval.state == :running && interval.detail ? %(,"args":{"released_by":"#{interval.detail}"}) : ""
        %({"ph":"X","name":"#{self.class.state_name(interval)}","cat":"gvl","pid":#{pid},"tid":#{tid},) +
          %("ts":#{us(interval.start_ns)},"dur":#{us(interval.duration_ns)}#{args}})
      end

      def write_native_lanes(emit)
        tids = @timeline.file.native_tids
        return if tids.empty?

        emit.(meta("process_name", NATIVE_PID, nil, "native threads"))
        tids.each { |serial, tid| emit.(meta("thread_name", NATIVE_PID, serial, "native thread #{serial} (tid #{tid})")) }
        @timeline.each_thread do |thread|
          thread.intervals.each do |interval|
            next unless interval.state == :running && interval.native

            emit.(%({"ph":"X","name":#{JSON.generate(thread.label)},"cat":"native","pid":#{NATIVE_PID},) +
                  %("tid":#{interval.native},"ts":#{us(interval.start_ns)},"dur":#{us(interval.duration_ns)}}))
          end
        end
      end
    end
  end
end
