# frozen_string_literal: true

module GVLScope
  module Lab
    # Linux caps the memory mappings of a process (vm.max_map_count, 65530 by default), and CRuby
    # spends 2 per thread: its stack and the stack's guard page (measured, /proc/self/maps with
    # 2,000 and 20,000 live threads: 2.00 per thread, 1:1 or M:N, 3.3.8 and 3.4.5, traced or not).
    # Past the cap CRuby dies with "[FATAL] failed to allocate memory": about 32,000 threads by
    # default, fewer when stacks of exited threads are still mapped (docs/performance.md). The lab
    # checks before it creates that many, and says how to raise the cap instead of crashing.
    module MapLimit
      PATH = "/proc/sys/vm/max_map_count"
      PER_THREAD = 2
      MARGIN = 1_000 # what else the process may map meanwhile: heaps, gvlscope's buffers
      RAISE = "sudo sysctl -w vm.max_map_count=262144"

      module_function

      # The cap, or nil where there is none to read (not Linux).
      def max_map_count(path = PATH)
        Integer(File.read(path).strip)
      rescue SystemCallError, ArgumentError
        nil
      end

      def maps_in_use(path = "/proc/self/maps")
        File.foreach(path).count
      rescue SystemCallError
        0
      end

      # nil when +threads+ more threads fit under the cap; otherwise one line: why not, and how
      # to raise it.
      def problem(threads, limit: max_map_count, in_use: maps_in_use)
        return nil unless limit

        needed = in_use + PER_THREAD * threads + MARGIN
        return nil if needed <= limit

        "#{threads} more threads need ~#{needed} memory mappings (CRuby maps #{PER_THREAD} per thread), " \
          "over vm.max_map_count = #{limit}; raise it: #{RAISE}"
      end
    end
  end
end
