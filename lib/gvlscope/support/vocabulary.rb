# frozen_string_literal: true

module GVLScope
  # The one set of words for what a thread is doing, used by the C recorder (enum gvls_state in
  # ext/gvlscope/metrics.h), the metrics, the timeline, every output format and the docs.
  # A new idle reason or release cause is one line here (and one colour in the HTML viewer).
  module Vocabulary
    # What a thread is doing, as a state of the timeline. "wait" is always waiting for the GVL;
    # a thread blocked on anything else is "idle".
    STATES = {
      started: "created, has not asked for the GVL yet",
      wait: "runnable, waiting for the GVL",
      run: "holding the GVL, running Ruby",
      gc: "holding the GVL, collecting garbage",
      idle: "not runnable: blocked on IO, sleep, a lock, a queue, a join or a C call without the GVL",
      exited: "exited (a zero-length marker)",
    }.freeze

    # Why a run (a hold of the GVL) ended. With a release site (a trace with stacks), the method
    # that gave the GVL up tells which blocking call it was (RELEASE_SITES).
    RELEASE_CAUSES = {
      io: "IO (read, write, select, sockets)",
      sleep: "sleep",
      lock: "a Mutex, Queue or ConditionVariable",
      join: "Thread#join / #value, Process.wait, a child process",
      pass: "Thread.pass",
      blocking: "another blocking call (a C extension without the GVL)",
      preempted: "the scheduler switched it out at the end of its timeslice",
      exit: "it exited",
      # The recorder reads a release's site only while another thread waits for the GVL, or inside
      # an event loop's turn (and only in a trace with stacks): the rest is not known, not guessed.
      unknown: "no release site recorded (one is recorded only while another thread waits for the GVL, or in an event loop's turn)",
    }.freeze

    # Why an idle thread was idle (docs/format.md, "Idle reasons"): the cause of the release before
    # it when its site was recorded; otherwise what GVL events alone tell (io_sleep, lock, unknown).
    IDLE_REASONS = {
      io: RELEASE_CAUSES[:io],
      sleep: RELEASE_CAUSES[:sleep],
      # With a site: a Mutex, Queue or ConditionVariable. Without: another thread made it runnable
      # (Mutex#unlock, Queue#push, ConditionVariable#signal, Thread#join's target exiting, #wakeup).
      lock: "lock / queue / join",
      join: RELEASE_CAUSES[:join],
      pass: RELEASE_CAUSES[:pass],
      blocking: "another blocking call (a C extension without the GVL)",
      # No site: it woke up on its own native thread, a blocking call (IO, sleep with a timeout, a
      # C extension's blocking region) returned. IO and sleep look the same in GVL events.
      io_sleep: "IO / sleep",
      # The trace ended (or the thread exited) before it became runnable again.
      unknown: "unknown",
    }.freeze

    # The one table that turns a release site's top frame (its full label) into a release cause;
    # the first match wins, a label that matches nothing is :blocking.
    RELEASE_SITES = [
      ["Kernel#sleep", :sleep],
      ["Thread.pass", :pass],
      [/\A(Thread::)?(Mutex|Queue|SizedQueue|ConditionVariable)#/, :lock],
      [/\A(Monitor|MonitorMixin)#/, :lock],
      [/\AThread#(join|value)\z/, :join],
      [/\AProcess(::Status)?\.(wait|wait2|waitpid|waitpid2|waitall)\z/, :join],
      [/\AKernel#(system|`)\z/, :join],
      [/\A(IO|File|BasicSocket|Socket|[A-Z]\w*Socket|[A-Z]\w*Server|OpenSSL::SSL::SSLSocket|Addrinfo)[#.]/, :io],
      [/\AKernel#(gets|puts|print|select|readline|readlines|open)\z/, :io],
    ].freeze

    # The state a thread's metrics row is in, by the number ext/gvlscope/metrics.h gives it
    # (enum gvls_state): index = number.
    METRIC_STATES = %i[unknown wait run idle exited].freeze

    # The GVL events of the native trace, by the number ext/gvlscope/format.h gives them; then the
    # two records of a trace with stacks that are not events (the reader takes them out). Ruby's
    # numbers of them all come from here (test/engine/numbering_test.rb checks it against format.h).
    EVENT_KINDS = [nil, :started, :ready, :resumed, :suspended, :exited, :gc_enter, :gc_exit, :arg, :sample,
                   :turn_begin, :turn_end, :turn_site, :turn_ready].freeze

    # States in which the thread holds the GVL.
    HOLDING = %i[run gc].freeze

    module_function

    # The release cause of a release site (a stack, innermost first): from its top frame.
    def release_cause(stack)
      label = stack.first&.label.to_s
      RELEASE_SITES.each { |matcher, cause| return cause if matcher === label } # rubocop:disable Style/CaseEquality
      :blocking
    end

    # How a state shows in a trace viewer: the state's name, and an idle thread's reason.
    def slice_name(state, reason)
      state == :idle ? "idle (#{reason.to_s.tr('_', '/')})" : state.to_s
    end

    # A thread's label in every output: its name, else "main", or "thread <serial>" followed by
    # where it was created when known: "thread 3 (app.rb:12)". A name several threads share
    # (+namesake+: five Sidekiq processors) is told apart by the serial: "processor #7".
    def thread_label(name, serial, main: false, created_at: nil, namesake: false)
      return namesake ? "#{name} ##{serial}" : name unless name.nil? || name.empty?
      return "main" if main

      created_at ? "thread #{serial} (#{created_at})" : "thread #{serial}"
    end

    # True when +label+ is the thread +wanted+ names: its label, or the name its namesakes share
    # ("processor" is "processor #7" and "processor #8").
    def thread_named?(label, wanted)
      label == wanted || label.match?(/\A#{Regexp.escape(wanted)} #\d+\z/)
    end

    # A source path (or "path:line": where a thread was created, a frame's file) shortened to
    # what tells it apart: inside a gem from the gem's directory
    # ("puma-8.0.2/lib/puma/thread_pool.rb:105"), inside Ruby's library from its version
    # ("ruby/3.3.0/monitor.rb:201"), under the working directory relative to it; any other path
    # whole. Thread labels and code locations both read paths through this.
    def short_site(site, cwd = working_directory)
      return site if site.nil?

      site[%r{/gems/([^/]+-[^/]+/.+)\z}, 1] || site[%r{/lib/(ruby/\d+\.\d+\.\d+/.+)\z}, 1] ||
        (cwd ? site.delete_prefix(cwd.end_with?("/") ? cwd : "#{cwd}/") : site)
    end

    # An object's inspect in a frame's label ("#<Rack::Builder:0x00007f3a…>"): a method defined in
    # config.ru is a singleton method of Rack's builder object.
    OBJECT_IN_LABEL = /#<([A-Z][\w:]*):0x\h+>\./

    # A frame's label (rb_profile_frame_full_label) as outputs show it: a singleton method of an
    # object as its class's method ("Rack::Builder#render_invoice"), other object addresses
    # left out ("#<Class>#call"): an address differs from run to run and says nothing.
    def code_label(label)
      return label unless label&.include?(":0x")

      label.gsub(OBJECT_IN_LABEL) { "#{Regexp.last_match(1)}#" }.gsub(/:0x\h+>/, ">")
    end

    def working_directory
      Dir.pwd
    rescue SystemCallError # removed under us: paths stay whole
      nil
    end

    # +text+ cut to +width+ characters in its middle, so a label keeps its name and its file:line:
    # "thread 12 (puma-8.0.2/lib/…/thread_pool.rb:105)".
    def fit(text, width)
      return text if text.size <= width
      return text[0, width] if width < 3

      tail = (width - 1) / 2
      "#{text[0, width - 1 - tail]}…#{text[-tail..]}"
    end

    # How a thread is shown where space allows (tables, viewer tracks): its label, and for a named
    # thread also where it was created ("echo (app.rb:7)"): several threads often share a name.
    # The label alone stays the thread's handle (findings, --thread NAME).
    def thread_display_name(label, created_at)
      return label if created_at.nil? || label.end_with?("(#{created_at})")

      "#{label} (#{created_at})"
    end
  end
end
