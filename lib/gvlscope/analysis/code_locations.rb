# frozen_string_literal: true

require_relative "../vocabulary"
require_relative "../model/trace_file"
require_relative "../model/scan"

module GVLScope
  module Analysis
    # Which code: from a trace with stacks (Timeline#stacks?).
    # - release sites: the calls after which threads gave the GVL up, each weighted by the wait for
    #   the GVL that followed it before the thread ran again ("which calls of mine cost the most
    #   waiting");
    # - the wait-weighted profile of holders: the holder's stack sampled while others waited, each
    #   sample weighted by the number of waiters (the code that made others wait);
    # - per waiter, where the holders were while it waited.
    # Frames are grouped by the code they name: the first frame of a stack in a source file (not a
    # C method, not Ruby's <internal:...> files), by method (a block counts as its method) and
    # file; a group's line is the line seen most.
    class CodeLocations
      # One row of the profile or of the site table: +frame+ (label, path, line), +weight+ (waiter
      # samples, or ns of wait that followed), +share+ of the total. A release site's frame is the
      # method that released the GVL (IO#read) with the path and line of the code that called it.
      Row = Struct.new(:frame, :weight, :share, :count, :cause, :threads, keyword_init: true) do
        def to_h = { label: frame.label, path: frame.path, line: frame.line, weight: weight, share: share.round(4),
                     count: count, cause: cause, threads: threads }.compact

        # How outputs name it: "`Counter#spin` (lib/counter.rb:8)", a site "`IO#read` at app.rb:12".
        def name
          return "`#{frame.label}`" unless frame.path

          cause ? "`#{frame.label}` at #{frame.path}:#{frame.line}" : "`#{frame.label}` (#{frame.path}:#{frame.line})"
        end
      end

      BLOCK = /\Ablock (?:\(\d+ levels\) )?in /

      attr_reader :timeline

      # +timeline+: a Model::Timeline, or a Model::Scan whose engine summed the samples and the
      # releases by stack (the same weights and counts, in the order they were first seen).
      def initialize(timeline)
        @timeline = timeline
        @labels = timeline.threads.transform_values(&:label)
        @scan = timeline.is_a?(Model::Scan) ? timeline : nil
      end

      def stacks? = @timeline.stacks?

      # The holders' code, heaviest first: weight = sum of waiters over the samples. With +thread+
      # (a serial), only the samples of that holder.
      def holder_profile(thread: nil)
        if @scan
          rows = thread ? @scan.code_rows(:holders).select { |row| row[0] == thread } : @scan.code_rows(:stacks)
          return rank(by_stack(rows) { |stack, weight, count| [code_frame(stack), weight, count] })
        end

        samples = @timeline.samples
        samples = samples.select { |sample| sample.thread == thread } if thread
        rank(samples.map { |sample| [code_frame(sample.stack), sample.waiters] })
      end


      # The holders' code while +waiter+ (a serial) waited for the GVL: each sample inside one of
      # its waits counts once.
      def holders_while_waiting(waiter)
        if @scan
          rows = @scan.code_rows(:waiters).select { |row| row[0] == waiter }
          return rank(by_stack(rows) { |stack, _weight, count| [code_frame(stack), count, count] })
        end

        waits = @timeline.threads[waiter]&.intervals&.select { |interval| interval.state == :wait } || []
        samples = @timeline.samples
        index = 0
        weighted = []
        waits.each do |wait|
          index += 1 while index < samples.size && samples[index].time_ns < wait.start_ns
          scan = index
          while scan < samples.size && samples[scan].time_ns < wait.end_ns
            sample = samples[scan]
            weighted << [code_frame(sample.stack), 1] if sample.thread != waiter
            scan += 1
          end
        end
        rank(weighted)
      end

      # Release sites, by the wait for the GVL that followed each release, heaviest first. With
      # +threads+ (serials), only their releases.
      def release_sites(threads: nil)
        rows = Hash.new { |hash, key| hash[key] = { weight: 0, count: 0, threads: {} } }
        @timeline.threads.each_value do |thread|
          next if threads && !threads.include?(thread.serial)

          each_release(thread) do |site, reason, waited, count|
            frame = code_frame(site)
            # By line: two reads of the same IO method on different lines are two calls of yours.
            row = rows[[site.first.label, frame.path, frame.line, reason]]
            row[:weight] += waited
            row[:count] += count
            row[:threads][thread.label] = true
          end
        end
        total = rows.sum { |_, row| row[:weight] }.to_f
        rows.map do |(top, path, line, cause), row|
          frame = Model::Frame.new(top, path, line)
          Row.new(frame: frame, weight: row[:weight], share: total.positive? ? row[:weight] / total : 0.0,
                  count: row[:count], cause: cause, threads: row[:threads].keys)
        end.sort_by { |row| [-row.weight, -row.count] }
      end

      # The first frame of +stack+ in a source file: the code a person wrote. Falls back to the top.
      def code_frame(stack)
        stack.find { |frame| frame.path && !frame.path.start_with?("<internal:") } || stack.first
      end

      private

      # Yields the site (a stack), cause and the ns the thread then waited for the GVL before it ran
      # again, of each :run interval that ended with a recorded release site (and 1); from a scan,
      # the same summed by site and cause (and their count), in the order first seen.
      def each_release(thread)
        if @scan
          (@releases ||= @scan.release_site_rows.group_by(&:first))[thread.serial]&.each do |_, site, reason, waited, count|
            yield @scan.file.stack(site), Model::Scan::REASONS[reason], waited, count
          end
          return
        end

        intervals = thread.intervals
        intervals.each_with_index do |run, index|
          next unless run.state == :run && run.site

          waited = 0
          after = index + 1 # by index, not a slice: a slice per release copies the rest of the thread
          while after < intervals.size && !%i[run exited].include?(intervals[after].state)
            waited += intervals[after].duration_ns if intervals[after].state == :wait
            after += 1
          end
          yield run.site, run.reason, waited, 1
        end
      end

      # [[stack, weight, count], ...] mapped by the block, in the order the engine first saw each
      # stack (as the samples come in a Timeline).
      def by_stack(rows)
        rows.sort_by { |row| row[4] }.map { |_, stack, weight, count, _| yield @scan.file.stack(stack), weight, count }
      end

      # [[frame, weight, count (1 when left out)], ...] grouped by method and file, heaviest first;
      # each group's line is the one with the most weight.
      def rank(weighted)
        groups = Hash.new { |hash, key| hash[key] = [0, Hash.new(0), 0] }
        weighted.each do |frame, weight, count|
          next unless frame

          group = groups[[frame.label.sub(BLOCK, ""), frame.path]]
          group[0] += weight
          group[1][frame.line] += weight
          group[2] += count || 1
        end
        total = groups.sum { |_, group| group[0] }.to_f
        groups.map do |(label, path), (weight, lines, count)|
          Row.new(frame: Model::Frame.new(label, path, lines.max_by(&:last).first), weight: weight,
                  share: total.positive? ? weight / total : 0.0, count: count)
        end.sort_by { |row| -row.weight }
      end
    end
  end
end
