# frozen_string_literal: true

require "gvlscope/support/vocabulary"
require "gvlscope/model/record"

# Writes valid .gvl traces (docs/format.md) of any size, fast: the memory test and bench/report.rb
# need traces of 10M and 100M events, which no recorder writes in reasonable time.
#
# The program it describes: +threads+ threads, each on its own native thread, hand the GVL around
# in turn (the hand-off thrash of issue 18): each holds it for ~1-3 us, releases it for a blocking
# call (with a release site), wakes up on its own native thread and waits for its next turn; the
# first thread collects garbage inside a hold every 64 turns, and a holder sample is taken (a
# SAMPLE and its ARG) once a period (~20 ms: the recorder takes one per 10 ms tick at most). Durations vary with the turn, so histograms and medians have
# more than one value. The threads existed before the trace (their first event is RESUMED: they
# were waiting).
#
# One period of PERIOD_ROUNDS rounds is simulated once; every lane's chunk of a period has the
# same records relative to its base, so the file is that chunk repeated with moving bases: writing
# 100M events takes seconds.
module SyntheticTrace
  PERIOD_ROUNDS = 2048
  KIND = GVLScope::Vocabulary::EVENT_KINDS.each_with_index.to_h.except(nil).freeze
  SITE_STACK = 1
  SAMPLE_STACK = 2

  module_function

  # Writes the trace; returns the number of events (records that are not ARG or SAMPLE).
  def write(path, events:, threads: 4, stacks: true)
    lanes = period(threads, stacks)
    period_events = lanes.sum { |lane| lane[:events] }
    periods = [(events + period_events - 1) / period_events, 1].max
    period_ns = lanes.map { |lane| lane[:records].last[0] }.max + 10_000
    File.open(path, "wb") do |io|
      io.write(header(stacks))
      periods.times do |number|
        lanes.each_with_index do |lane, index|
          base = number * period_ns + lane[:first_time]
          io.write([1, 24 + lane[:payload].bytesize, index + 1, 9000 + index, base, lane[:records].size, 0].pack("L<L<L<L<Q<L<L<"))
          io.write(lane[:payload])
        end
        io.write(thread_chunk(threads)) if number.zero?
      end
      io.write(stacks_chunk) if stacks
      io.write(thread_chunk(threads))
      records = periods * lanes.sum { |lane| lane[:records].size }
      io.write([3, 24, periods * period_ns, records, 0].pack("L<L<Q<Q<Q<"))
    end
    periods * period_events
  end

  # A starved thread: threads 2 and 3 hand the GVL to each other +holds+ times (~1-3 us each,
  # thread 2 collecting garbage in every 64th hold) while thread 1 waits from the start to the end
  # and thread 4 from the middle of a hold halfway through (blame's buffer of holds during a wait).
  # Returns the number of events.
  def write_starved(path, holds:)
    lanes = Array.new(4) { [] }
    time = 1_000
    holds.times do |turn|
      serial = 2 + turn % 2
      hold = 1_000 + 250 * (turn % 9)
      lanes[serial - 1] << [time, :resumed]
      lanes[serial - 1] << [time + hold / 3, :gc_enter] << [time + 2 * hold / 3, :gc_exit] if serial == 2 && (turn % 64).zero?
      lanes[3] << [time + hold / 2, :ready] if turn == holds / 2
      lanes[serial - 1] << [time + hold, :suspended] << [time + hold + 200 + 10 * (turn % 7), :ready]
      time += hold + 300
    end
    time += 1_000
    lanes[0] << [time, :resumed] << [time + 500, :suspended]
    lanes[3] << [time + 600, :resumed] << [time + 1_100, :suspended]
    File.open(path, "wb") do |io|
      io.write(header(false))
      lanes.each_with_index do |records, index|
        records.each_slice(4096) do |slice|
          base = slice.first[0]
          payload = slice.map { |at, kind| GVLScope::Model::Record.pack(KIND.fetch(kind), index + 1, at - base) }.pack("Q<*")
          io.write([1, 24 + payload.bytesize, index + 1, 9000 + index, base, slice.size, 0].pack("L<L<L<L<Q<L<L<"), payload)
        end
      end
      io.write(thread_chunk(4))
      io.write([3, 24, time + 2_000, lanes.sum(&:size), 0].pack("L<L<Q<Q<Q<"))
    end
    lanes.sum(&:size)
  end

  # Exactly the records given, one events chunk per lane in the order given: +lanes+ { native
  # serial => [base_ns, [[kind, value, delta_ns], ...]] }, +kind+ a symbol of KIND or a number (any
  # that fits a record's field). With stacks (ARG records carry values), no thread table.
  def write_records(path, lanes, end_ns:)
    File.open(path, "wb") do |io|
      io.write(header(true))
      lanes.each do |native, (base, records)|
        payload = records.map { |kind, value, delta| GVLScope::Model::Record.pack(KIND.fetch(kind, kind), value, delta) }.pack("Q<*")
        io.write([1, 24 + payload.bytesize, native, 9000, base, records.size, 0].pack("L<L<L<L<Q<L<L<"), payload)
      end
      io.write([3, 24, end_ns, lanes.sum { |_, (_, records)| records.size }, 0].pack("L<L<Q<Q<Q<"))
    end
  end

  def header(stacks)
    ["GVLSCOPE", 2, 48, 1_000_000, 1_700_000_000_000_000_000, 4242, 100_000, stacks ? 1 : 0, 0]
      .pack("a8L<L<Q<Q<L<L<L<L<")
  end

  # Each lane's records of one period: [[time, kind, serial or value], ...], and as a payload.
  def period(threads, stacks)
    records = Array.new(threads) { [] }
    time = 0
    PERIOD_ROUNDS.times do |round|
      threads.times do |thread|
        serial = thread + 1
        hold = 1_000 + 250 * ((round + thread) % 9)
        turn = [[time, :resumed, serial]]
        if thread.zero? && (round % 64).zero?
          turn << [time + hold / 3, :gc_enter, serial] << [time + 2 * hold / 3, :gc_exit, serial]
        end
        turn << [time + hold / 2, :sample, serial] << [time + hold / 2, :arg, SAMPLE_STACK] if stacks && round == PERIOD_ROUNDS / 2 && thread.zero?
        turn << [time + hold, :suspended, serial]
        turn << [time + hold, :arg, SITE_STACK] if stacks
        blocking = 500 + 100 * (round % 5) # shorter than the others' turns: it waits for its next one
        turn << [time + hold + blocking, :ready, serial]
        # In time order, as a recorder writes a lane (an ARG keeps its place right after its record).
        records[thread].concat(turn.each_with_index.sort_by { |(at, _, _), index| [at, index] }.map(&:first))
        time += hold + 300 + 40 * (round % 3) # the hand-off: the next thread wakes up
      end
    end
    records.map do |lane|
      first = lane.first[0]
      payload = lane.map { |at, kind, value| GVLScope::Model::Record.pack(KIND.fetch(kind), value, at - first) }.pack("Q<*")
      { records: lane, first_time: first, payload: payload, events: lane.count { |_, kind, _| !%i[arg sample].include?(kind) } }
    end
  end

  def thread_chunk(threads)
    body = (1..threads).map do |serial|
      name = "worker #{serial}"
      site = "app.rb:#{10 + serial}"
      [serial, 1, 0, name.bytesize, site.bytesize].pack("L<5") + name + site
    end.join
    [2, body.bytesize].pack("L<L<") + body
  end

  # Two stacks: the release site (IO#sysread called from app.rb:12) and the holders' code.
  def stacks_chunk
    locations = [[0, "IO#sysread", ""], [12, "block in work", "app.rb"], [5, "Object#compute", "app.rb"]]
    body = [locations.size, 2, 0, 0, 0, 0].pack("L<L<Q<Q<Q<Q<")
    locations.each { |line, label, path| body << [line, label.bytesize, path.bytesize].pack("L<3") << label << path }
    body << [2, 1, 2].pack("L<3") << [2, 3, 2].pack("L<3")
    [4, body.bytesize].pack("L<L<") + body
  end
end
