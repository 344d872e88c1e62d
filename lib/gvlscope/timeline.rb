# frozen_string_literal: true

module GVLScope
  # The one model every output reads: events turned into per-thread state intervals.
  #
  # States: :started (created, not yet asking for the GVL), :wants_gvl (runnable, waiting for the
  # GVL), :running (holds the GVL), :gc (holds it, collecting garbage), :waiting (blocked: not
  # runnable), :died (a zero-length marker at EXITED).
  #
  # :waiting carries why, as far as the events tell (see docs/format.md, "Waiting reasons"):
  #   :io_sleep the thread woke up on its own native thread: a blocking call (IO, sleep with a
  #            timeout, a C extension's blocking region) returned. IO and sleep look the same
  #            in GVL events; telling them apart would need the stack at SUSPENDED
  #   :lock    another thread made it runnable: Mutex#unlock, Queue#push, ConditionVariable#signal,
  #            Thread#join's target exiting, Thread#wakeup
  #   :unknown the trace ended (or the thread exited) before it became runnable again
  #
  # A running interval ends with a release cause:
  #   :blocking  it blocked (the :waiting interval that follows says on what); Thread.pass too,
  #              as it cannot be told from a blocking call that returns at once
  #   :preempted the scheduler switched it out at the end of its timeslice
  #   :exit      it exited
  class Timeline
    Interval = Struct.new(:thread, :state, :start_ns, :end_ns, :detail, :native) do
      def duration_ns = end_ns - start_ns
    end

    ThreadTimeline = Struct.new(:serial, :info, :intervals) do
      def label = info.label
      def ractor_id = info.ractor_id
    end

    attr_reader :file, :threads, :duration_ns, :waiting_counter, :waiters_at_acquire

    def self.from_file(path)
      new(TraceFile.read(path))
    end

    def initialize(file)
      @file = file
      @duration_ns = file.duration_ns
      @threads = {}
      @waiting_counter = [] # [[time_ns, threads wanting the GVL], ...] per change, all Ractors
      # log2 histogram (as Metrics': bucket b >= 1 holds 2**(b-1)...2**b - 1) of the threads of the
      # same Ractor still wanting the GVL when a thread acquires it.
      @waiters_at_acquire = Array.new(64, 0)
      build
    end

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

    INFERRED_BEFORE = { ready: :waiting, resumed: :wants_gvl, suspended: :running, exited: :running,
                        gc_enter: :running, gc_exit: :gc }.freeze

    # Per-thread scan state. ractor and intervals are cached here: looked up once per thread, not
    # once per event (a trace holds millions).
    Cursor = Struct.new(:serial, :ractor, :intervals, :state, :since, :detail, :native, :suspend_native,
                        :suspend_time, :others_wanted, :resumed_at, :running_interval, :resumes_at_suspend)

    def build
      cursors = {}
      @wanting = Hash.new(0) # ractor id -> threads in :wants_gvl
      @wanting_total = 0
      times = @file.times
      kinds = @file.kinds
      serials = @file.threads
      natives = @file.natives
      half_timeslice = @file.timeslice_ns / 2
      resumes_by_ractor = Hash.new(0) # a generation counter: any RESUMED in the Ractor

      times.each_index do |i|
        time = times[i]
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
          cursor.detail = :unknown if cursor.state == :waiting
          add_wanting(ractor, 1) if cursor.state == :wants_gvl
        end
        case kind
        when :started
          transition(cursor, :started, time)
        when :ready
          if cursor.state == :waiting && cursor.detail.nil?
            # Same rule as ext/gvlscope/metrics.c: see docs/format.md, "Release causes".
            if natives[i] == cursor.suspend_native && cursor.others_wanted &&
               resumes_by_ractor[ractor] == cursor.resumes_at_suspend &&
               time_since_resume(cursor) >= half_timeslice
              # SUSPENDED then READY on the same native thread before anyone else got the GVL:
              # the thread gave the GVL up but stayed runnable. Rewrite the release.
              cursor.state = :wants_gvl
              add_wanting(ractor, 1)
              cursor.running_interval.detail = :preempted if cursor.running_interval
              next
            end
            cursor.detail = natives[i] == cursor.suspend_native ? :io_sleep : :lock
          end
          transition(cursor, :wants_gvl, time) unless cursor.state == :wants_gvl
        when :resumed
          resumes_by_ractor[ractor] += 1
          still_waiting = @wanting[ractor] - (cursor.state == :wants_gvl ? 1 : 0)
          @waiters_at_acquire[still_waiting.clamp(0, nil).bit_length] += 1
          transition(cursor, :running, time)
          cursor.resumed_at = time
          cursor.native = natives[i]
        when :suspended
          others = @wanting[ractor] - (cursor.state == :wants_gvl ? 1 : 0)
          transition(cursor, :waiting, time)
          cursor.running_interval&.detail ||= :blocking
          cursor.suspend_native = natives[i]
          cursor.suspend_time = time
          cursor.others_wanted = others.positive?
          cursor.resumes_at_suspend = resumes_by_ractor[ractor]
        when :exited
          if cursor.state == :waiting && cursor.detail.nil?
            # SUSPENDED then EXITED: the last release was the exit itself, not a wait.
            cursor.running_interval.detail = :exit if cursor.running_interval
            cursor.state = :died
            cursor.since = time
            next
          end
          was_running = cursor.state == :running
          transition(cursor, :died, time)
          cursor.running_interval.detail = :exit if was_running && cursor.running_interval
        when :gc_enter
          transition(cursor, :gc, time) if cursor.state == :running || cursor.state.nil?
        when :gc_exit
          transition(cursor, :running, time) if cursor.state == :gc
        end
      end
      cursors.each_value { |cursor| close(cursor, @duration_ns) }
      @file.thread_info.each_key { |serial| thread_timeline(serial) }
    end

    def add_wanting(ractor, delta)
      @wanting[ractor] += delta
      @wanting_total += delta
    end

    # Ends the cursor's state at +time+ and starts +state+; keeps the wanting-the-GVL counter.
    def transition(cursor, state, time)
      add_wanting(cursor.ractor, -1) if cursor.state == :wants_gvl
      add_wanting(cursor.ractor, 1) if state == :wants_gvl
      close(cursor, time)
      cursor.state = state
      cursor.since = time
      cursor.detail = nil
      last = @waiting_counter.last
      if last && last[0] == time
        last[1] = @wanting_total
      elsif last.nil? || last[1] != @wanting_total
        @waiting_counter << [time, @wanting_total]
      end
    end

    def time_since_resume(cursor)
      cursor.resumed_at ? cursor.suspend_time - cursor.resumed_at : 0
    end

    def thread_timeline(serial)
      @threads[serial] ||= ThreadTimeline.new(serial, @file.thread_info[serial] ||
        TraceFile::ThreadInfo.new(serial: serial, ractor_id: 0), [])
    end

    # Ends the cursor's current state at +time+ as an interval.
    def close(cursor, time)
      state = cursor.state
      if state == :died
        cursor.intervals << Interval.new(cursor.serial, :died, cursor.since, cursor.since, nil)
        cursor.state = :gone
        return
      end
      return if state.nil? || state == :gone

      detail = cursor.detail
      detail ||= :unknown if state == :waiting
      interval = Interval.new(cursor.serial, state, cursor.since, time, detail, state == :running ? cursor.native : nil)
      cursor.intervals << interval if time > cursor.since || state == :started
      if state == :running
        cursor.running_interval = interval
      elsif state == :waiting || state == :wants_gvl
        cursor.running_interval = nil
      end
    end
  end
end
