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

  # exec (Kernel#exec, Kernel.exec, Process.exec; Puma's hot restart) replaces the process without
  # at_exit: the trace is stopped before it, complete, and the new image (a Ruby with the same
  # RUBYOPT) traces into a file of its own. An exec that fails (ENOENT) leaves the program going
  # on: its trace goes on in a new file, NAME-2.gvl (the first free), as autorun's does.
  # spawn, system and popen fork first: not hooked.
  module ExecHook
    def exec(*args, **options) = GVLScope.__send__(:exec_traced) { super(*args, **options) }

    # Kernel#exec and Kernel.exec are redefined in place, calling the original: a module prepended
    # to Kernel would change the frame label of every Kernel method (`Kernel.sleep` for
    # `Kernel#sleep`) in release sites and in any other profiler of the program.
    def self.wrap_kernel
      # Quietly: under `ruby -w` a redefinition warns, on the program's stderr.
      verbose, $VERBOSE = $VERBOSE, nil
      instance = Kernel.instance_method(:exec)
      Kernel.define_method(:exec) do |*args, **options|
        GVLScope.__send__(:exec_traced) { instance.bind_call(self, *args, **options) }
      end
      Kernel.__send__(:private, :exec) # as it was (a module function)
      singleton = Kernel.method(:exec)
      Kernel.define_singleton_method(:exec) do |*args, **options|
        GVLScope.__send__(:exec_traced) { singleton.call(*args, **options) }
      end
    ensure
      $VERBOSE = verbose
    end
  end

  @after_fork_callbacks = []
  @before_daemon_callbacks = []
  @after_daemon_callbacks = []
  @before_exec_callbacks = []
  @after_failed_exec_callbacks = []

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

    # Runs the block just before this process calls exec (its trace is still running).
    def before_exec(&block)
      @before_exec_callbacks << block
      block
    end

    # Runs the block when an exec failed and the program goes on (its exception is raised after).
    def after_failed_exec(&block)
      @after_failed_exec_callbacks << block
      block
    end

    private

    def exec_traced
      before_exec_in_process
      yield
    rescue SystemCallError
      after_failed_exec_in_process
      raise
    end

    # The callbacks first (autorun stops its trace, telling its drops), then any trace still running.
    def before_exec_in_process
      @before_exec_callbacks.each(&:call)
      @trace_stopped_for_exec = nil
      return unless tracing?

      @trace_stopped_for_exec = [@trace_path, @trace_options]
      stop
    rescue StandardError
      nil # the exec goes ahead whatever the trace did
    end

    def after_failed_exec_in_process
      if @trace_stopped_for_exec
        path, options = @trace_stopped_for_exec
        @trace_stopped_for_exec = nil
        start_in_next_free(path, **options)
      end
      @after_failed_exec_callbacks.each(&:call)
    rescue StandardError
      nil # the program gets exec's own exception
    end

    def start_in_next_free(path, **options)
      (2..100).each do |n|
        return start(suffixed_path(path, n), **options)
      rescue Errno::EEXIST
        nil
      end
    end

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
Process.singleton_class.prepend(GVLScope::ExecHook)
GVLScope::ExecHook.wrap_kernel
