# frozen_string_literal: true

module GVLScope
  # Work at the end of the process that must give the other threads no turn. At_exit blocks run
  # while the other threads still live, and one that sleeps or waits there (stopping a trace joins
  # its writer thread; a file write) lets them run code they never reach untraced. Ruby kills them
  # after the last at_exit block and then runs the finalizers of the objects still alive
  # (rb_ec_cleanup: at_exit, rb_ractor_terminate_all, rb_ec_finalize): that is where this runs.
  module AtExit
    KEPT = Object.new # never collected: its finalizers run at exit only

    module_function

    # Runs the block at exit once the other threads are gone, in this process only (a forked
    # child inherits the finalizers).
    def after_other_threads(&block)
      owner = Process.pid
      ObjectSpace.define_finalizer(KEPT, proc { block.call if Process.pid == owner })
      block
    end
  end
end
