# frozen_string_literal: true

require_relative "../support/vocabulary"
require_relative "../model/trace_file"
require_relative "../model/scan"

module GVLScope
  module Analysis
    # Which code: from a trace with stacks (Model::Scan#stacks?).
    # - release sites: the calls after which threads gave the GVL up, each weighted by the wait for
    #   the GVL that followed it before the thread ran again ("which calls of mine cost the most
    #   waiting");
    # - the wait-weighted profile of holders: the holder's stack sampled while others waited, each
    #   sample weighted by the number of waiters (the code that made others wait);
    # - per waiter, where the holders were while it waited.
    # Frames are grouped by the code they name: the first frame of a stack in a source file (not a
    # C method, not Ruby's <internal:...> files), by method (a block counts as its method) and
    # file; a group's label ("block in" kept) and line are the ones seen most. Rows name code as
    # every output shows it: labels without object addresses (Vocabulary.code_label), paths
    # shortened as thread labels' are (Vocabulary.short_site).
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

      # +timeline+: a Model::Scan, whose engine summed the samples and the releases by stack (their
      # weights and counts, in the order they were first seen).
      def initialize(timeline)
        @timeline = timeline
      end

      def stacks? = @timeline.stacks?

      # The holders' code, heaviest first: weight = sum of waiters over the samples. With +thread+
      # (a serial), only the samples of that holder.
      def holder_profile(thread: nil)
        rows = thread ? @timeline.code_rows(:holders).select { |row| row.thread == thread } : @timeline.code_rows(:stacks)
        rank(by_stack(rows) { |stack, weight, count| [code_frame(stack), weight, count] })
      end


      # The holders' code while +waiter+ (a serial) waited for the GVL: each sample inside one of
      # its waits counts once.
      def holders_while_waiting(waiter)
        rows = @timeline.code_rows(:waiters).select { |row| row.thread == waiter }
        rank(by_stack(rows) { |stack, _weight, count| [code_frame(stack), count, count] })
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
          frame = shown(top, path, line)
          Row.new(frame: frame, weight: row[:weight], share: total.positive? ? row[:weight] / total : 0.0,
                  count: row[:count], cause: cause, threads: row[:threads].keys)
        end.sort_by { |row| [-row.weight, -row.count] }
      end

      # The first frame of +stack+ in a source file: the code a person wrote. Falls back to the top.
      def code_frame(stack)
        stack.find { |frame| frame.path && !frame.path.start_with?("<internal:") } || stack.first
      end

      private

      # Yields the site (a stack), cause, the ns the thread then waited for the GVL before it ran
      # again and the count of the :run intervals of +thread+ that ended with a recorded release
      # site: summed by site and cause by the engine, in the order first seen.
      def each_release(thread)
        (@releases ||= @timeline.release_site_rows.group_by(&:thread))[thread.serial]&.each do |row|
          yield @timeline.file.stack(row.site_id), Model::Scan::REASONS[row.reason], row.waited_ns, row.releases
        end
      end

      # [[stack, weight, count], ...] of Engine::CodeRows, mapped by the block, in the order the
      # engine first saw each stack (the samples' time order).
      def by_stack(rows)
        rows.sort_by(&:seq).map { |row| yield @timeline.file.stack(row.stack_id), row.weight, row.count }
      end

      # [[frame, weight, count (1 when left out)], ...] grouped by method and file, heaviest first;
      # each group's label and line are the ones with the most weight.
      def rank(weighted)
        groups = Hash.new { |hash, key| hash[key] = [0, Hash.new(0), 0, Hash.new(0)] }
        weighted.each do |frame, weight, count|
          next unless frame

          group = groups[[frame.label.sub(BLOCK, ""), frame.path]]
          group[0] += weight
          group[1][frame.line] += weight
          group[2] += count || 1
          group[3][frame.label] += weight
        end
        total = groups.sum { |_, group| group[0] }.to_f
        groups.map do |(_, path), (weight, lines, count, labels)|
          Row.new(frame: shown(labels.max_by(&:last).first, path, lines.max_by(&:last).first), weight: weight,
                  share: total.positive? ? weight / total : 0.0, count: count)
        end.sort_by { |row| -row.weight }
      end

      # A frame as outputs name it.
      def shown(label, path, line) = Model::Frame.new(label, path, line).shown
    end
  end
end
