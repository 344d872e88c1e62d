# frozen_string_literal: true

require_relative "trace_file"
require_relative "../units"

module GVLScope
  module Model
    # The one model every output reads: events turned into per-thread state intervals, in the words
    # of Vocabulary (states, idle reasons, release causes).
    #
    # An interval's +reason+ says why: for :idle, the idle reason (Vocabulary::IDLE_REASONS); for
    # :run, the release cause that ended it (Vocabulary::RELEASE_CAUSES). A :run interval that
    # ended with a release recorded with its site has +site+: the thread's stack at SUSPENDED
    # (a frozen Array of Model::Frame, innermost first), from which the cause is told.
    class Timeline
      Interval = Struct.new(:thread, :state, :start_ns, :end_ns, :reason, :native, :site) do
        def duration_ns = end_ns - start_ns
      end

      ThreadTimeline = Struct.new(:serial, :info, :intervals) do
        def label = info.label
        def display_name = Vocabulary.thread_display_name(info.label, info.created_at)
        def ractor_id = info.ractor_id
      end

      # +samples+: Model::Sample, the holder's stack while others of its Ractor waited (time order).
      attr_reader :file, :threads, :duration_ns, :waiting_counter, :waiters_at_acquire, :samples

      def initialize(file)
        @file = file
        @duration_ns = file.duration_ns
        @threads = {}
        @waiting_counter = [] # [[time_ns, threads waiting for the GVL], ...] per change, all Ractors
        # Log2 histogram of the threads of the same Ractor still waiting for the GVL when a thread
        # acquires it.
        @waiters_at_acquire = Array.new(Log2::BUCKETS, 0)
        @samples = []
        build
      end

      # True when the trace recorded code locations (false for old traces, --no-stacks and
      # gvl-tracing imports): outputs then say "stacks: not recorded".
      def stacks? = @file.respond_to?(:stacks?) && @file.stacks?

      def each_thread(&block) = @threads.each_value(&block)

      def ractors
        @threads.values.group_by(&:ractor_id)
      end

      # True when Ruby threads and native threads are not one-to-one (M:N threads, or a native
      # thread reused after another exited): only then is a separate native-thread view informative.
      def shared_native_threads?
        return @shared_native_threads if defined?(@shared_native_threads)

        owner = {}
        @shared_native_threads = @threads.each_value.any? do |thread|
          thread.intervals.any? do |interval|
            next false unless interval.native

            (owner[interval.native] ||= thread.serial) != thread.serial
          end
        end
      end

      private

      INFERRED_BEFORE = { ready: :idle, resumed: :wait, suspended: :run, exited: :run,
                          gc_enter: :run, gc_exit: :gc }.freeze
      NO_SITES = {}.freeze

      # Per-thread scan state. ractor and intervals are cached here: looked up once per thread, not
      # once per event (a trace holds millions).
      Cursor = Struct.new(:serial, :ractor, :intervals, :state, :since, :reason, :native, :suspend_native,
                          :suspend_time, :others_wanted, :resumed_at, :run_interval, :resumes_at_suspend,
                          :site_cause)

      def build
        cursors = {}
        @waiting_by_ractor = Hash.new(0) # ractor id -> threads in :wait
        @waiting_total = 0
        times = @file.times
        kinds = @file.kinds
        serials = @file.threads
        natives = @file.natives
        half_timeslice = @file.timeslice_ns / 2
        resumes_by_ractor = Hash.new(0) # a generation counter: any RESUMED in the Ractor
        site_ids = stacks? ? @file.site_ids : NO_SITES
        raw_samples = stacks? ? @file.raw_samples : []
        next_sample = 0

        times.each_index do |i|
          time = times[i]
          if next_sample < raw_samples.size && raw_samples[next_sample][0] <= time
            next_sample = add_samples(raw_samples, next_sample, time)
          end
          serial = serials[i]
          cursor = cursors[serial] ||= begin
            thread = thread_timeline(serial)
            Cursor.new(serial, thread.ractor_id, thread.intervals, nil, 0)
          end
          ractor = cursor.ractor
          kind = kinds[i]
          if cursor.state.nil? && kind != :started
            # A thread that existed before the trace: its first event tells what it was doing.
            cursor.state = INFERRED_BEFORE.fetch(kind)
            cursor.reason = :unknown if cursor.state == :idle
            add_waiting(ractor, 1) if cursor.state == :wait
          end
          case kind
          when :started
            transition(cursor, :started, time)
          when :ready
            if cursor.state == :idle && cursor.reason.nil?
              # Same rule as ext/gvlscope/metrics.c: see docs/format.md, "Release causes".
              if natives[i] == cursor.suspend_native && cursor.others_wanted &&
                 resumes_by_ractor[ractor] == cursor.resumes_at_suspend &&
                 time_since_resume(cursor) >= half_timeslice
                # SUSPENDED then READY on the same native thread before anyone else got the GVL:
                # the thread gave the GVL up but stayed runnable. Rewrite the release.
                cursor.state = :wait
                add_waiting(ractor, 1)
                cursor.run_interval.reason = :preempted if cursor.run_interval
                next
              end
              cursor.reason = cursor.site_cause || (natives[i] == cursor.suspend_native ? :io_sleep : :lock)
            end
            transition(cursor, :wait, time) unless cursor.state == :wait
          when :resumed
            resumes_by_ractor[ractor] += 1
            still_waiting = @waiting_by_ractor[ractor] - (cursor.state == :wait ? 1 : 0)
            @waiters_at_acquire[Log2.bucket(still_waiting.clamp(0, nil))] += 1
            transition(cursor, :run, time)
            cursor.resumed_at = time
            cursor.native = natives[i]
            cursor.site_cause = nil
          when :suspended
            others = @waiting_by_ractor[ractor] - (cursor.state == :wait ? 1 : 0)
            transition(cursor, :idle, time)
            release(cursor, site_ids.empty? ? nil : site_ids[(time << 24) | serial])
            cursor.suspend_native = natives[i]
            cursor.suspend_time = time
            cursor.others_wanted = others.positive?
            cursor.resumes_at_suspend = resumes_by_ractor[ractor]
          when :exited
            if cursor.state == :idle && cursor.reason.nil?
              # SUSPENDED then EXITED: the last release was the exit itself, not a wait.
              cursor.run_interval.reason = :exit if cursor.run_interval
              cursor.state = :exited
              cursor.since = time
              next
            end
            was_running = cursor.state == :run
            transition(cursor, :exited, time)
            cursor.run_interval.reason = :exit if was_running && cursor.run_interval
          when :gc_enter
            transition(cursor, :gc, time) if cursor.state == :run || cursor.state.nil?
          when :gc_exit
            transition(cursor, :run, time) if cursor.state == :gc
          end
        end
        add_samples(raw_samples, next_sample, Float::INFINITY)
        cursors.each_value { |cursor| close(cursor, @duration_ns) }
        @file.thread_info.each_key { |serial| thread_timeline(serial) }
      end

      # At SUSPENDED: what ended the run. With a site, its top frame tells the cause (the READY
      # after may still call it a preemption); without, it is :blocking and the idle reason comes
      # from GVL events alone.
      def release(cursor, stack_id)
        site = stack_id && @file.stack(stack_id)
        cause = site ? Vocabulary.release_cause(site) : :blocking
        cursor.site_cause = site && cause
        run = cursor.run_interval or return
        run.site ||= site
        run.reason ||= cause
      end

      # The holder samples up to +time+, each with the threads of its Ractor waiting then (as
      # this scan counts them). A sample taken when the scan sees nobody waiting (its tick raced
      # an acquisition) made nobody wait: it is left out. Returns the next sample's index.
      def add_samples(raw_samples, from, time)
        index = from
        while index < raw_samples.size && raw_samples[index][0] <= time
          sample_time, serial, stack_id = raw_samples[index]
          waiters = @waiting_by_ractor[thread_timeline(serial).ractor_id]
          stack = @file.stack(stack_id)
          @samples << Sample.new(sample_time, serial, stack, waiters) if waiters.positive? && stack
          index += 1
        end
        index
      end

      def add_waiting(ractor, delta)
        @waiting_by_ractor[ractor] += delta
        @waiting_total += delta
      end

      # Ends the cursor's state at +time+ and starts +state+; keeps the counter of threads waiting for the GVL.
      def transition(cursor, state, time)
        add_waiting(cursor.ractor, -1) if cursor.state == :wait
        add_waiting(cursor.ractor, 1) if state == :wait
        close(cursor, time)
        cursor.state = state
        cursor.since = time
        cursor.reason = nil
        last = @waiting_counter.last
        if last && last[0] == time
          last[1] = @waiting_total
        elsif last.nil? || last[1] != @waiting_total
          @waiting_counter << [time, @waiting_total]
        end
      end

      def time_since_resume(cursor)
        cursor.resumed_at ? cursor.suspend_time - cursor.resumed_at : 0
      end

      def thread_timeline(serial)
        @threads[serial] ||= ThreadTimeline.new(serial, @file.thread_info[serial] ||
          ThreadInfo.new(serial: serial, ractor_id: 0), [])
      end

      # Ends the cursor's current state at +time+ as an interval.
      def close(cursor, time)
        state = cursor.state
        if state == :exited
          cursor.intervals << Interval.new(cursor.serial, :exited, cursor.since, cursor.since, nil)
          cursor.state = :gone
          return
        end
        return if state.nil? || state == :gone

        reason = cursor.reason
        reason ||= cursor.site_cause || :unknown if state == :idle
        interval = Interval.new(cursor.serial, state, cursor.since, time, reason, state == :run ? cursor.native : nil)
        cursor.intervals << interval if time > cursor.since || state == :started
        if state == :run
          cursor.run_interval = interval
        elsif state == :idle || state == :wait
          cursor.run_interval = nil
        end
      end
    end
  end
end
