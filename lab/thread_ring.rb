# frozen_string_literal: true

# Koichi Sasada's ring (RubyKaigi 2022, "Making MaNy threads on Ruby"): n threads in a ring, each
# popping a token from its Queue and pushing it to the next one's. The one ring of the lab's
# scenario (lab/ring.rb) and of bench/ring_mappings.rb.
class ThreadRing
  # Starts +count+ threads; yields each index before its thread is created (progress).
  def initialize(count)
    @queues = Array.new(count + 1) { Queue.new }
    @threads = Array.new(count) do |i|
      yield i if block_given?
      Thread.new(@queues[i], @queues[i + 1]) do |input, output|
        while (token = input.pop)
          output.push(token + 1)
        end
        output.close
      end
    end
  end

  # Sends a token around the ring +laps+ times; returns the hops made (laps x threads: none lost).
  def lap(laps)
    hops = 0
    laps.times { @queues.first.push(0); hops += @queues.last.pop }
    hops
  end

  # Ends every thread (each closes the next one's Queue) and joins them.
  def close
    @queues.first.close
    @threads.each(&:join)
  end
end
