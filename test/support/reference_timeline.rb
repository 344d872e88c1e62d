# frozen_string_literal: true

require "json"
require "bigdecimal"
require "gvlscope/model"
require_relative "whole_trace"
require "gvlscope/analysis"
require "gvlscope/analysis/advisor_inputs"
require "gvlscope/formats"

# The GVL state machine and the analysis of its intervals in plain Ruby, slow and obviously right:
# what the report engine (ext/gvlscope_engine, Model::Scan) replaced, kept only as the oracle the
# engine is checked against (test/engine/engine_test.rb, test/engine/fuzz_test.rb; ReferenceCheck below).
#
# ReferenceTimeline turns a trace's events (Model.read, whole_trace.rb) into per-thread state intervals, in the
# words of Vocabulary. An interval's +reason+ says why: for :idle, the idle reason
# (Vocabulary::IDLE_REASONS); for :run, the release cause that ended it
# (Vocabulary::RELEASE_CAUSES). A :run interval that ended with a release recorded with its site
# has +site+: the thread's stack at SUSPENDED. ReferenceReport is an Analysis::Report whose every
# part (rows, histograms, blame, overview, detail windows, code locations) is computed here from
# those intervals, so the report formats write it as they write the engine's.
class ReferenceTimeline
  Interval = GVLScope::Model::Interval
  ThreadTimeline = GVLScope::Model::ThreadTimeline
  Sample = GVLScope::Model::Sample
  ThreadInfo = GVLScope::Model::ThreadInfo
  Log2 = GVLScope::Log2
  Vocabulary = GVLScope::Vocabulary

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

  # The event loops' turns (Model::Turns) from the Ruby reader's turn records (none in an import).
  def turns
    records = @file.respond_to?(:raw_turns) ? @file.raw_turns : []
    @turns ||= GVLScope::Model::Turns.build(records, end_ns: @duration_ns, stack: ->(id) { @file.stack(id) })
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
        release(cursor, site_ids.empty? ? nil : site_ids[GVLScope::Model::TraceFile.site_key(time, serial)])
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
  # after may still call it a preemption); without, it is :unknown and the idle reason comes
  # from GVL events alone.
  def release(cursor, stack_id)
    site = stack_id && @file.stack(stack_id)
    cause = site ? Vocabulary.release_cause(site) : :unknown
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

class ReferenceTimeline
  # The trace at +path+, its events read whole by Model.read.
  def self.open(path) = new(GVLScope::Model.read(path))

  # The reference's own writers of what the exports draw, to compare with the engine's: each
  # thread's intervals, and the counter of threads waiting for the GVL (#waiting_counter).
  def intervals_of(serial) = @threads.fetch(serial).intervals
end

# A thread's GVL wait that IO it had started overlapped, from its intervals in order, by the
# hook's rule (ext/gvlscope/metrics_event.h): the waits after releases that returned at once (a
# write), counted when a release that blocked (its read) follows without a hold of
# OVERLAP_HOLD_NS or more in between.
class ReferenceIOOverlap
  QUICK_RELEASE_NS = GVLScope::Analysis::AdvisorInputs::QUICK_RELEASE_NS
  OVERLAP_HOLD_NS = GVLScope::Analysis::AdvisorInputs::OVERLAP_HOLD_NS

  attr_reader :counted

  def initialize
    @counted = @pending = @hold = 0
    @woke_at_once = false
    @previous = nil
  end

  def add(state, duration_ns)
    case state
    when :run, :gc then @hold += duration_ns
    when :idle
      @pending = 0 if @hold >= OVERLAP_HOLD_NS
      @hold = 0
      @woke_at_once = duration_ns < QUICK_RELEASE_NS
      unless @woke_at_once
        @counted += @pending
        @pending = 0
      end
    when :wait
      if @previous == :idle # after a blocking release (one that returned at once, or not)
        @pending += duration_ns if @woke_at_once
      else # a preemption: the hold ended at its SUSPENDED (a timeslice: other work)
        @pending = 0 if @hold >= OVERLAP_HOLD_NS
        @woke_at_once = false
      end
      @hold = 0
    end
    @previous = state
  end
end

# Per-thread rows (Analysis::ThreadStats::Row) summed from each thread's intervals.
class ReferenceStats < GVLScope::Analysis::ThreadStats
  Row = GVLScope::Analysis::ThreadStats::Row

  def initialize(timeline) # rubocop:disable Lint/MissingSuper
    @timeline = timeline
    @slow_wait_ns = timeline.file.timeslice_ns / 4
    @cpu = cpu_samples(timeline.file)
    all_waits = []
    @rows = timeline.threads.values.map { |thread| row_for(thread, all_waits) }
    @median_wait_ns = GVLScope::Analysis.median(all_waits)
  end

  private

  def row_for(thread, all_waits)
    totals = Hash.new(0)
    released = Hash.new(0)
    holds = 0
    longest_run = longest_wait = longest_gc = nil
    waits = []
    slow_blocking = []
    blocking = []
    previous = nil
    streaks = Streaks.new(@slow_wait_ns, @timeline.file.timeslice_ns)
    idle_by_reason = Hash.new(0)
    overlap = ReferenceIOOverlap.new
    held_off_cpu = 0
    thread.intervals.each do |interval|
      totals[interval.state] += interval.duration_ns
      off_cpu = %i[run gc].include?(interval.state) ? off_cpu_ns(interval) : 0
      held_off_cpu += off_cpu
      streaks.add(interval.state, interval.start_ns, interval.end_ns, off_cpu)
      overlap.add(interval.state, interval.duration_ns)
      idle_by_reason[interval.reason] += interval.duration_ns if interval.state == :idle && interval.duration_ns.positive?
      case interval.state
      when :run
        holds += 1 unless previous&.state == :gc # a GC inside a hold splits it, it is still one hold
        released[interval.reason] += 1 if interval.reason
        longest_run = interval if longest_run.nil? || interval.duration_ns > longest_run.duration_ns
      when :gc
        longest_gc = interval if longest_gc.nil? || interval.duration_ns > longest_gc.duration_ns
      when :wait
        waits << interval.duration_ns
        longest_wait = interval if longest_wait.nil? || interval.duration_ns > longest_wait.duration_ns
        if previous&.state == :idle
          blocking << interval.duration_ns
          slow_blocking << interval if interval.duration_ns >= @slow_wait_ns
        end
      end
      previous = interval
    end
    streaks.close
    all_waits.concat(waits)
    longest_slow = slow_blocking.max_by(&:duration_ns) # max_by keeps the first of equals
    median = GVLScope::Analysis.method(:median)
    Row.new(serial: thread.serial, label: thread.label, created_at: thread.info.created_at,
            ractor_id: thread.ractor_id, run_ns: totals[:run],
            wait_ns: totals[:wait], idle_ns: totals[:idle], gc_ns: totals[:gc], holds: holds,
            waits: waits.size, longest_wait_ns: longest_wait&.duration_ns || 0, released_by: released,
            longest_run: span(longest_run), longest_wait: span(longest_wait),
            blocking_waits: blocking.size, slow_blocking_waits: slow_blocking.size,
            blocking_wait_ns: blocking.sum,
            median_slow_blocking_wait_ns: median.(slow_blocking.map(&:duration_ns)),
            longest_slow_blocking_wait: span(longest_slow), median_wait_ns: median.(waits),
            longest_gc: span(longest_gc), idle_by_reason: idle_by_reason, io_overlap_wait_ns: overlap.counted,
            **streaks.to_h, **(@cpu ? { held_off_cpu_ns: held_off_cpu } : { long_streak_off_cpu_ns: nil, longest_streak_off_cpu_ns: nil }))
  end

  def span(interval) = interval && [interval.start_ns, interval.end_ns]

  # The trace's CPU chunks: { ticks: sorted times, by_native: { native => [[time, cpu_ns], ...] } }, nil without.
  def cpu_samples(file)
    return nil unless file.respond_to?(:cpu_ticks) && !file.cpu_ticks.empty?

    by_native = file.cpu_samples.unpack("Q<*").each_slice(3).group_by(&:first)
    { ticks: file.cpu_ticks.unpack("q<*").sort, by_native: by_native.transform_values { |rows| rows.map { |_, time, cpu| [time, cpu] }.sort } }
  end

  # Of a run or gc interval, the ns its native thread was measurably off a CPU (docs/format.md,
  # type 5): the larger of two lower bounds, inside (between the first and the last tick inside
  # the hold, the wall time less what the CPU time grew) and around (the hold's wall time less what
  # the CPU time grew from the last tick at or before its start to the first at or after its end).
  def off_cpu_ns(interval)
    samples = @cpu && interval.native && @cpu[:by_native][interval.native]
    wall = interval.end_ns - interval.start_ns
    return 0 if samples.nil? || wall <= 0

    cpu_at = ->(tick) { samples.select { |time, _| time <= tick }.last }
    ticks = @cpu[:ticks].select { |tick| tick.between?(interval.start_ns, interval.end_ns) }
    inside = 0
    if ticks.size >= 2 && (last = cpu_at.(ticks.last))
      first = cpu_at.(ticks.first)
      first_tick = first ? ticks.first : (first = samples.find { |time, _| time >= ticks.first })[0]
      span = ticks.last - first_tick
      ran = last[1] - first[1]
      inside = ran.negative? ? span : span - ran if span.positive? && ran < span
    end
    before = @cpu[:ticks].select { |tick| tick <= interval.start_ns }.last
    after = @cpu[:ticks].find { |tick| tick >= interval.end_ns }
    begin_cpu = before && cpu_at.(before)
    end_cpu = after && cpu_at.(after)
    around = 0
    if begin_cpu && end_cpu && end_cpu[1] - begin_cpu[1] < wall
      around = end_cpu[1] < begin_cpu[1] ? wall : wall - (end_cpu[1] - begin_cpu[1])
    end
    [inside, around].max
  end

  # A thread's hold streaks (see ThreadStats::Row), from its intervals in order.
  class Streaks
    def initialize(pause_ns, long_ns)
      @pause_ns = pause_ns
      @long_ns = long_ns
      @start_ns = nil
      @to_h = { long_streaks: 0, long_streak_held_ns: 0, longest_streak: nil, longest_streak_held_ns: 0,
                long_streak_off_cpu_ns: 0, longest_streak_off_cpu_ns: 0 }
    end

    attr_reader :to_h

    def add(state, start_ns, end_ns, off_cpu_ns = 0)
      case state
      when :run, :gc
        unless @start_ns
          @start_ns = start_ns
          @held_ns = 0
          @off_cpu_ns = 0
        end
        @held_ns += end_ns - start_ns
        @off_cpu_ns += off_cpu_ns
        @last_end_ns = end_ns
      when :idle then close(paused: true) if end_ns - start_ns >= @pause_ns
      when :exited, :started then close
      end
    end

    def close(paused: false)
      return unless @start_ns

      held = @held_ns
      running = held - @off_cpu_ns # a streak is long when it ran a timeslice (ThreadStats::Row)
      if paused && running >= @long_ns
        @to_h[:long_streaks] += 1
        @to_h[:long_streak_held_ns] += held
        @to_h[:long_streak_off_cpu_ns] += @off_cpu_ns
        if running > @to_h[:longest_streak_held_ns] - @to_h[:longest_streak_off_cpu_ns]
          @to_h[:longest_streak] = [@start_ns, @last_end_ns]
          @to_h[:longest_streak_held_ns] = held
          @to_h[:longest_streak_off_cpu_ns] = @off_cpu_ns
        end
      end
      @start_ns = nil
    end
  end
end

# Who held the GVL while each thread waited for it, swept from the intervals. Within a Ractor the
# holds (running or gc intervals) never overlap, so one sweep over the waits in start order, with
# a pointer into the holds that only moves forward, finds every overlap.
class ReferenceBlame < GVLScope::Analysis::Blame
  def initialize(timeline) # rubocop:disable Lint/MissingSuper
    @all_waits = Hash.new { |hash, serial| hash[serial] = Hash.new(0) }
    @after_blocking = Hash.new { |hash, serial| hash[serial] = Hash.new(0) }
    @during_gc = Hash.new(0)
    timeline.ractors.each_value { |threads| sweep(threads) }
  end

  private

  def sweep(threads)
    holds = []
    waits = [] # [interval, after a blocking call?]
    threads.each do |thread|
      previous = nil
      thread.intervals.each do |interval|
        case interval.state
        when :run, :gc then holds << interval
        when :wait then waits << [interval, previous&.state == :idle]
        end
        previous = interval
      end
    end
    # Ties in thread order (a stable sort): threads that waited since the trace began all start
    # at 0, and the hashes' order (a finding's list of threads) must not depend on the sort.
    holds.sort_by!.with_index { |hold, index| [hold.start_ns, index] }
    waits.sort_by!.with_index { |(interval, _), index| [interval.start_ns, index] }
    first = 0
    waits.each do |wait, after_blocking|
      first += 1 while first < holds.size && holds[first].end_ns <= wait.start_ns
      attribute(wait, holds, first, after_blocking)
    end
  end

  def attribute(wait, holds, first, after_blocking)
    all = @all_waits[wait.thread]
    blocking = @after_blocking[wait.thread] if after_blocking
    held = 0
    index = first
    while index < holds.size && (hold = holds[index]).start_ns < wait.end_ns
      overlap = [hold.end_ns, wait.end_ns].min - [hold.start_ns, wait.start_ns].max
      if overlap.positive? && hold.thread != wait.thread
        all[hold.thread] += overlap
        blocking[hold.thread] += overlap if blocking
        @during_gc[wait.thread] += overlap if hold.state == :gc
        held += overlap
      end
      index += 1
    end
    gap = wait.duration_ns - held
    return unless gap.positive?

    all[HAND_OFF] += gap
    blocking[HAND_OFF] += gap if blocking
  end
end

# The overview (Analysis::Overview) binned from the intervals.
class ReferenceOverview < GVLScope::Analysis::Overview
  def self.of(timeline, bins: BINS)
    new(timeline.duration_ns, bins: bins).tap do |overview|
      timeline.each_thread do |thread|
        thread.intervals.each { |interval| overview.add(thread.serial, interval.state, interval.start_ns, interval.end_ns) }
      end
    end
  end

  # Spreads [start_ns, end_ns) in +state+ over the bins it covers. States other than run, wait,
  # idle and gc are moments (started, exited), not counted.
  def add(serial, state, start_ns, end_ns)
    offset = STATE_INDEX[state] or return
    return unless end_ns > start_ns

    lane = @lanes[serial] ||= Array.new(@bins * 4, 0)
    last_bin = @bins - 1
    from = start_ns - @start_ns
    to = end_ns - @start_ns
    first = (from / @bin_ns).clamp(0, last_bin)
    last = ((to - 1) / @bin_ns).clamp(0, last_bin)
    if first == last
      lane[4 * first + offset] += to - from
      return
    end

    lane[4 * first + offset] += (first + 1) * @bin_ns - from
    ((first + 1)...last).each { |bin| lane[4 * bin + offset] += @bin_ns }
    lane[4 * last + offset] += to - last * @bin_ns
  end
end

# Code locations (Analysis::CodeLocations) from the samples and the :run intervals' sites.
class ReferenceCodeLocations < GVLScope::Analysis::CodeLocations
  def holder_profile(thread: nil)
    samples = @timeline.samples
    samples = samples.select { |sample| sample.thread == thread } if thread
    rank(samples.map { |sample| [code_frame(sample.stack), sample.waiters] })
  end

  def holders_while_waiting(waiter)
    waits = @timeline.threads[waiter]&.intervals&.select { |interval| interval.state == :wait } || []
    samples = @timeline.samples
    index = 0
    weighted = []
    waits.each do |wait|
      index += 1 while index < samples.size && samples[index].time_ns < wait.start_ns
      at = index
      while at < samples.size && samples[at].time_ns < wait.end_ns
        sample = samples[at]
        weighted << [code_frame(sample.stack), 1] if sample.thread != waiter
        at += 1
      end
    end
    rank(weighted)
  end

  private

  def each_release(thread)
    intervals = thread.intervals
    intervals.each_with_index do |run, index|
      next unless run.state == :run && run.site

      waited = 0
      after = index + 1
      while after < intervals.size && !%i[run exited].include?(intervals[after].state)
        waited += intervals[after].duration_ns if intervals[after].state == :wait
        after += 1
      end
      yield run.site, run.reason, waited, 1
    end
  end
end

# An Analysis::Report of a ReferenceTimeline: every part from the intervals, here.
class ReferenceReport < GVLScope::Analysis::Report
  def initialize(timeline, thread: nil) # rubocop:disable Lint/MissingSuper
    @timeline = timeline
    @stats = ReferenceStats.new(timeline)
    @only_thread = thread
  end

  def blame = @blame ||= ReferenceBlame.new(@timeline)
  def code_locations = @code_locations ||= ReferenceCodeLocations.new(@timeline)

  def histograms
    @histograms ||= begin
      holds = Array.new(GVLScope::Log2::BUCKETS, 0)
      waits = Array.new(GVLScope::Log2::BUCKETS, 0)
      selected_threads.each do |thread|
        hold_ns = nil
        thread.intervals.each do |interval|
          case interval.state
          when :run, :gc
            hold_ns = (hold_ns || 0) + interval.duration_ns # a GC inside a hold does not end it
            next
          when :wait
            waits[GVLScope::Log2.bucket(interval.duration_ns)] += 1
          end
          holds[GVLScope::Log2.bucket(hold_ns)] += 1 if hold_ns
          hold_ns = nil
        end
        holds[GVLScope::Log2.bucket(hold_ns)] += 1 if hold_ns
      end
      { hold_ns: holds, wait_ns: waits, waiters_at_acquire: @timeline.waiters_at_acquire }
    end
  end

  def overview(bins: GVLScope::Analysis::Overview::BINS)
    @overviews ||= {}
    @overviews[bins] ||= ReferenceOverview.of(@timeline, bins: bins)
  end

  # Report#detail: the intervals that overlap [start_ns, end_ns) (a moment counts when it falls
  # in it), by start, a moment before what starts with it, then thread order; the first +limit+.
  def detail(start_ns, end_ns, limit: 200_000)
    found = []
    threads = @timeline.threads.size
    rank = {}
    @timeline.each_thread do |thread|
      rank[thread.serial] = rank.size
      intervals = thread.intervals
      # A thread's intervals follow one another: their ends are in order.
      first = intervals.bsearch_index { |interval| interval.end_ns > start_ns || interval.start_ns >= start_ns }
      next unless first

      taken = 0
      intervals[first..].each do |interval|
        break if interval.start_ns >= end_ns || taken == limit

        found << interval
        taken += 1
      end
    end
    found.sort_by! do |interval|
      ((2 * interval.start_ns + (interval.end_ns > interval.start_ns ? 1 : 0)) * threads) + rank[interval.thread]
    end
    found.first(limit)
  end

  def details(windows, limit: 200_000)
    windows.map { |start_ns, end_ns, own| detail(start_ns, end_ns, limit: own || limit) }
  end
end

# The engine's every answer on a trace against the reference's (a Minitest::Test mixin).
module ReferenceCheck
  # Asserts that the engine (Model::Scan) and ReferenceTimeline answer the same on the trace at
  # +path+: threads, intervals, samples, rows and totals, histograms, blame, code locations,
  # overviews, detail windows, the report in every format, and the exports' slices and counter.
  def assert_engine_matches_reference(path, scan: GVLScope::Model::Scan.open(path, spill: true), reference: ReferenceTimeline.open(path))
    name = File.basename(path)
    assert_equal reference.threads.keys, scan.threads.keys, "#{name}: threads"
    assert_equal reference.duration_ns, scan.duration_ns, "#{name}: duration"
    assert_equal reference.stacks?, scan.stacks?, "#{name}: stacks?"
    reference.each_thread do |thread|
      assert_equal thread.intervals.map(&:to_a), scan.threads[thread.serial].intervals.map(&:to_a),
                   "#{name}: intervals of #{thread.label}"
    end
    assert_equal reference.samples.map(&:to_a), scan.samples.map(&:to_a), "#{name}: samples"
    assert_equal reference.waiters_at_acquire, scan.waiters_at_acquire, "#{name}: waiters at acquire"
    assert_equal reference.shared_native_threads?, scan.shared_native_threads?, "#{name}: shared native threads"
    old = ReferenceReport.new(reference)
    new = GVLScope::Analysis::Report.new(scan)
    assert_equal old.all_rows.map(&:to_h), new.all_rows.map(&:to_h), "#{name}: rows"
    assert_equal old.stats.held_ns, new.stats.held_ns, "#{name}: GVL held"
    assert_equal old.all_waits_median_ns, new.all_waits_median_ns, "#{name}: median wait"
    assert_equal old.histograms, new.histograms, "#{name}: histograms"
    %i[all_waits after_blocking during_gc].each do |matrix|
      assert_equal old.blame.public_send(matrix).to_a, new.blame.public_send(matrix).to_a, "#{name}: blame #{matrix}"
    end
    code = [old.code_locations, new.code_locations]
    assert_equal(*code.map { |c| c.holder_profile.map(&:to_h) }, "#{name}: holders")
    assert_equal(*code.map { |c| c.release_sites.map(&:to_h) }, "#{name}: release sites")
    old.all_rows.each do |row|
      assert_equal(*code.map { |c| c.holder_profile(thread: row.serial).map(&:to_h) }, "#{name}: holder #{row.label}")
      assert_equal(*code.map { |c| c.holders_while_waiting(row.serial).map(&:to_h) }, "#{name}: waiting #{row.label}")
      assert_equal(*code.map { |c| c.release_sites(threads: [row.serial]).map(&:to_h) }, "#{name}: sites #{row.label}")
    end
    [1, 7, 2000].each do |bins|
      overviews = [old, new].map { |report| report.overview(bins: bins) }
      assert_equal(*overviews.map { |overview| [overview.bin_ns, overview.serials] }, "#{name}: overview of #{bins} bins")
      overviews.first.serials.each do |serial|
        assert_equal(*overviews.map { |overview| overview.lane(serial) }, "#{name}: overview lane #{serial}, #{bins} bins")
      end
    end
    duration = reference.duration_ns
    windows = [[0, duration], [duration / 4, duration / 3], [duration / 2, duration / 2 + 1_000_000]]
    assert_equal(*[old, new].map { |report| report.details(windows, limit: 500).map { |found| found.map(&:to_a) } },
                 "#{name}: detail windows")
    %w[text json html].each do |format|
      entry = GVLScope::Formats.fetch(format, command: "report")
      assert_equal entry.format_class.new(old).to_s, entry.format_class.new(new).to_s, "#{name}: report --format #{format}"
    end
    assert_exports_match_reference(name, scan, reference)
  end

  # The engine's exports draw the reference's intervals: each thread's Chrome slices (and native
  # lanes when native threads are shared), the counter of threads waiting for the GVL, and each
  # thread's speedscope row. (The loops' turns, on tracks and profiles of their own, are Model::Turns'.)
  def assert_exports_match_reference(name, scan, reference)
    # Times are microseconds with up to 3 decimals: exact as BigDecimal. A time below zero
    # (a broken trace's) is written as its floored microseconds, then the ns left over:
    # -1,500 ns is "-2.5".
    chrome = JSON.parse(GVLScope::Formats::ChromeJSON.new(scan).to_s, decimal_class: BigDecimal)["traceEvents"]
    ns = ->(us) { (us * 1000).to_i }
    written = ->(ns) { ns.negative? ? (((ns / 1000) - Rational(ns % 1000, 1000)) * 1000).to_i : ns }
    slices = chrome.select { |event| event["ph"] == "X" && event["cat"].nil? }.group_by { |event| event["tid"] }
    native = chrome.select { |event| event["ph"] == "X" && event["cat"] == "native" }
    expected_native = []
    reference.each_thread do |thread|
      expected = thread.intervals.map do |interval|
        [GVLScope::Vocabulary.slice_name(interval.state, interval.reason), written.(interval.start_ns),
         written.(interval.duration_ns), interval.state == :run ? interval.reason&.to_s : nil]
      end
      got = (slices[thread.serial] || []).map do |event|
        [event["name"], ns.(event["ts"]), ns.(event["dur"]), event.dig("args", "released_by")]
      end
      assert_equal expected, got, "#{name}: Chrome slices of #{thread.label}"
      thread.intervals.each do |interval|
        next unless interval.state == :run && interval.native

        expected_native << [thread.display_name, interval.native, written.(interval.start_ns), written.(interval.duration_ns)]
      end
    end
    expected_native = [] unless reference.shared_native_threads? && !reference.file.native_tids.empty?
    assert_equal expected_native, native.map { |event| [event["name"], event["tid"], ns.(event["ts"]), ns.(event["dur"])] },
                 "#{name}: Chrome native lanes"
    counter = chrome.select { |event| event["ph"] == "C" }.map { |event| [ns.(event["ts"]), event.dig("args", "threads")] }
    assert_equal reference.waiting_counter.map { |time, count| [written.(time), count] }, counter, "#{name}: the counter of threads waiting"

    speedscope = JSON.parse(GVLScope::Formats::Speedscope.new(scan).to_s)
    frames = speedscope.dig("shared", "frames").map { |frame| frame["name"] }
    # A loop thread's fibers profile follows its row (test/formats/fiber_views_test.rb checks it).
    fibers = scan.turns.map(&:thread).uniq.map { |serial| "#{scan.threads[serial].display_name}: fibers" }
    rows = speedscope["profiles"].select { |profile| profile["type"] == "evented" && !fibers.include?(profile["name"]) }
    drawn = reference.threads.values.select { |thread| thread.intervals.any? { |interval| interval.end_ns > interval.start_ns } }
    assert_equal drawn.size, rows.size, "#{name}: speedscope rows"
    drawn.zip(rows).each do |thread, row|
      expected = thread.intervals.reject { |interval| interval.end_ns == interval.start_ns }.flat_map do |interval|
        slice = GVLScope::Vocabulary.slice_name(interval.state, interval.reason)
        [["O", slice, interval.start_ns], ["C", slice, interval.end_ns]]
      end
      assert_equal expected, row["events"].map { |event| [event["type"], frames[event["frame"]], event["at"]] },
                   "#{name}: speedscope row of #{thread.label}"
    end
  end
end
