# frozen_string_literal: true

require "timeout"

# A child that leads a process group of its own (a server and its workers), stopped so that a stuck
# one cannot hang its caller: TERM to +term+ (the group, or only its leader where a TERM to the whole
# group races the leader's own stop), then KILL to the group after +grace+ seconds.
module ProcessGroup
  module_function

  def stop(pid, term: -pid, grace: 15)
    Process.kill(:TERM, term)
    Timeout.timeout(grace) { Process.wait(pid) }
  rescue Timeout::Error
    Process.kill(:KILL, -pid)
    Process.wait(pid)
  rescue Errno::ESRCH, Errno::ECHILD
    nil
  end
end
