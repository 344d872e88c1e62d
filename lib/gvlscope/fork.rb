# frozen_string_literal: true

require_relative "native"
require_relative "trace"

module GVLScope
  # Process._fork (Ruby 3.1+) is called by every fork: Kernel#fork, Process.fork, IO.popen("-"),
  # Puma's workers. In the child, the inherited trace is dropped (its writer thread did not
  # survive the fork, and the file is the parent's) and metrics restart from zero, so a worker's
  # numbers are its own. Hooks that want a trace per child register with GVLScope.after_fork.
  module ForkHook
    def _fork
      pid = super
      GVLScope.__send__(:after_fork_in_child) if pid.zero?
      pid
    end
  end

  # Process.daemon forks through daemon(3), not Process._fork: the same reset, and the hooks that
  # registered with GVLScope.after_daemon (the daemon is the program going on under a new pid).
  module DaemonHook
    def daemon(*)
      GVLScope.__send__(:before_daemon_in_parent)
      result = super
      GVLScope.__send__(:after_daemon_in_child)
      result
    end
  end

  @after_fork_callbacks = []
  @before_daemon_callbacks = []
  @after_daemon_callbacks = []

  class << self
    # Runs the block in every forked child, after gvlscope reset its state there.
    def after_fork(&block)
      @after_fork_callbacks << block
      block
    end

    # Runs the block in the process that calls Process.daemon, just before it forks.
    def before_daemon(&block)
      @before_daemon_callbacks << block
      block
    end

    # Runs the block in the daemon Process.daemon made, after gvlscope reset its state there.
    def after_daemon(&block)
      @after_daemon_callbacks << block
      block
    end

    private

    def before_daemon_in_parent = @before_daemon_callbacks.each(&:call)

    def after_daemon_in_child
      was_tracing = Native.after_fork_in_child
      @trace_path = nil
      @after_daemon_callbacks.each { |callback| callback.call(was_tracing) }
    end

    def after_fork_in_child
      was_tracing = Native.after_fork_in_child
      @trace_path = nil
      @after_fork_callbacks.each { |callback| callback.call(was_tracing) }
    end
  end
end

Process.singleton_class.prepend(GVLScope::ForkHook)
Process.singleton_class.prepend(GVLScope::DaemonHook)
