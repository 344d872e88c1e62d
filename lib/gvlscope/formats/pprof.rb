# frozen_string_literal: true

require "stringio"
require "zlib"
require_relative "format"
require_relative "protobuf_wire"
require_relative "../support/errors"
require_relative "../version"
require_relative "../model/scan"

module GVLScope
  module Formats
    # A trace with stacks -> a pprof profile (profile.proto, gzipped: what `go tool pprof`,
    # Pyroscope, Datadog and Google Cloud Profiler read), hand-encoded. Two kinds of samples, each
    # a stack (leaf first, as pprof wants) with a "thread" label:
    #
    # - holders: the holder's sampled stack while others waited, with its holder_samples (1 a
    #   sample), waiting_threads (the threads waiting then: the folded export's weight) and
    #   gvl_wait in ns: the wait the blame puts on that holder (Analysis::Blame: each wait split
    #   among the holds of other threads that overlap it), shared among the holder's samples by
    #   their waiting threads. Wait blamed on a holder that was never sampled (between two 10 ms
    #   ticks, another Ractor) is one "(holder not sampled)" frame of that thread, and the wait
    #   while nobody held the GVL one "(GVL hand-off)" frame: gvl_wait sums to all the wait;
    # - release sites: where threads gave the GVL up, with a "cause" label (io, sleep, lock, ...),
    #   their releases and wait_after_release (ns the thread then waited for the GVL before it ran
    #   again; Analysis::CodeLocations#release_sites).
    #
    # The default sample type is gvl_wait; `go tool pprof -sample_index=releases` and the others
    # pick another. Samples of the same thread and stack are one sample (their values summed), so
    # the size grows with stacks, not with the trace: all comes from the engine's sums
    # (Model::Scan#samples, #blame_rows, #release_site_rows), nothing per interval.
    class Pprof < Format
      include ProtobufWire
      SAMPLE_TYPES = [%w[holder_samples count], %w[waiting_threads count], %w[gvl_wait nanoseconds],
                      %w[releases count], %w[wait_after_release nanoseconds]].freeze
      DEFAULT_TYPE = "gvl_wait"
      # The holders are sampled at the timer thread's 10 ms tick (docs/format.md, "Code locations").
      PERIOD_NS = 10_000_000
      NOT_SAMPLED = "(holder not sampled)"
      HAND_OFF = "(GVL hand-off)"

      # Raises GVLScope::Error for a trace without stacks, before any byte is written.
      def initialize(subject)
        super
        return if subject.stacks?

        raise Error, "#{subject.file.path}: no stacks recorded (traced with --no-stacks, or not a gvlscope v2 trace)"
      end

      def write(io)
        gzipped = StringIO.new(+"".b)
        gzip = Zlib::GzipWriter.new(gzipped)
        gzip.mtime = gzip_mtime
        gzip.write(profile)
        gzip.finish
        io << gzipped.string
        io
      end

      # The profile.proto message, not compressed.
      def profile
        @strings = { "" => 0 }
        @functions = {}
        @locations = {}
        samples = holder_samples + release_samples
        out = +"".b
        SAMPLE_TYPES.each { |type, unit| out << field_bytes(1, value_type(type, unit)) }
        samples.each { |sample| out << field_bytes(2, sample) }
        out << field_bytes(3, mapping)
        @locations.each do |(label, path, line), id|
          location = field_varint(1, id) + field_varint(2, 1) +
                     field_bytes(4, field_varint(1, function(label, path)) + field_varint(2, line.to_i))
          out << field_bytes(4, location)
        end
        # No system_name: pprof would take a name with "<" for C++ and cut "block in <main>" to "block in ".
        @functions.each do |(label, path), id|
          out << field_bytes(5, field_varint(1, id) + field_varint(2, string(label)) + field_varint(4, string(path.to_s)))
        end
        time = scan.file.start_realtime_ns.to_i
        time = 0 if time > INT64_MAX # profile.proto's time_nanos is an int64: 0, not set, rather than a date before 1970
        period = value_type("wall", "nanoseconds") # the holders' sampling: a tick of wall-clock time
        comment = string("gvlscope #{VERSION}: #{File.basename(scan.file.path.to_s)}")
        default = string(DEFAULT_TYPE)
        @strings.each_key { |text| out << field_bytes(6, text) }
        out << field_varint(9, time) << field_varint(10, scan.duration_ns) << field_bytes(11, period) <<
          field_varint(12, PERIOD_NS) << field_varint(13, comment) << field_varint(14, default)
        out
      end

      private

      INT64_MAX = 2**63 - 1
      GZIP_MTIME_MAX = 2**32 - 1 # gzip's MTIME is 32 bits: seconds up to 2106-02-07

      # The trace's start, not now: an export of a trace is the same bytes every time. A start gzip
      # cannot hold (after 2106: a wrong clock, or a corrupt header) is 1 (a zero would be "now"
      # to some zlib bindings); the profile's own time_nanos keeps the date.
      def gzip_mtime
        seconds = (scan.file.start_realtime_ns || 0) / 1_000_000_000
        seconds.between?(1, GZIP_MTIME_MAX) ? seconds : 1
      end

      # The engine's answers (a Model::Scan): this export uses its sums only.
      def scan = @subject

      def labels = @labels ||= scan.threads.transform_values(&:label)

      # [[serial, stack, samples, waiting threads], ...] by holder and stack, in the order first seen.
      def holder_groups
        groups = {}
        scan.samples.each do |sample|
          group = groups[[sample.thread, sample.stack]] ||= [sample.thread, sample.stack, 0, 0]
          group[2] += 1
          group[3] += sample.waiters
        end
        groups.values
      end

      def holder_samples
        blamed = Hash.new(0)
        scan.blame_rows.each { |row| blamed[row.holder] += row.all_ns.to_i }
        groups = holder_groups
        groups.group_by(&:first).each do |serial, own|
          split(blamed.delete(serial) || 0, own.map { |group| group[3] }).each_with_index { |share, index| own[index] << share }
        end
        samples = groups.map do |serial, stack, count, waiters, wait_ns|
          sample(shown_stack(stack).map { |frame| location(frame.label, frame.path, frame.line) }, [count, waiters, wait_ns, 0, 0],
                 thread: serial)
        end
        hand_off = blamed.delete(nil)
        blamed.each do |serial, ns|
          samples << sample([location(NOT_SAMPLED, nil, 0)], [0, 0, ns, 0, 0], thread: serial) if ns.positive?
        end
        samples << sample([location(HAND_OFF, nil, 0)], [0, 0, hand_off, 0, 0]) if hand_off&.positive?
        samples
      end

      # +total+ split in proportion to +weights+, in integers that add up to it (the largest
      # remainders get the ns left over; a tie goes to the first).
      def split(total, weights)
        weights = weights.map { 1 } if weights.sum.zero? # samples always have a waiter; evenly if not
        sum = weights.sum
        return weights if sum.zero?

        parts = weights.map { |weight| (total * weight).divmod(sum) }
        left = total - parts.sum(&:first)
        order = parts.each_index.sort_by { |index| [-parts[index][1], index] }
        shares = parts.map(&:first)
        order.first(left).each { |index| shares[index] += 1 }
        shares
      end

      def release_samples
        scan.release_site_rows.map do |row|
          stack = scan.file.stack(row.site_id) || []
          sample(shown_stack(stack).map { |frame| location(frame.label, frame.path, frame.line) }, [0, 0, 0, row.releases, row.waited_ns],
                 thread: row.thread, cause: Model::Scan::REASONS[row.reason].to_s)
        end
      end

      # Sample: location ids (1, packed), values (2, packed), labels (3: key 1, str 2).
      def sample(locations, values, thread: nil, cause: nil)
        body = field_bytes(1, locations.map { |id| varint(id) }.join) + field_bytes(2, values.map { |v| varint(v) }.join)
        body << field_bytes(3, field_varint(1, string("thread")) + field_varint(2, string(labels[thread] || "thread #{thread}"))) if thread
        body << field_bytes(3, field_varint(1, string("cause")) + field_varint(2, string(cause))) if cause
        body
      end

      # One location per (label, path, line), one function per (label, path); ids from 1.
      def location(label, path, line) = @locations[[label, path, line.to_i]] ||= @locations.size + 1
      def function(label, path) = @functions[[label, path]] ||= @functions.size + 1
      def string(text) = @strings[text.encode(Encoding::UTF_8)] ||= @strings.size

      def value_type(type, unit) = field_varint(1, string(type)) + field_varint(2, string(unit))

      # The one mapping every location names: symbolized already (functions, files, lines).
      def mapping
        field_varint(1, 1) + field_varint(5, string("ruby")) + field_varint(7, 1) + field_varint(8, 1) + field_varint(9, 1)
      end
    end
  end
end
