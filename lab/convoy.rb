# frozen_string_literal: true

# The convoy effect (Beazley 2010; Ivo Anjo 2023): a TCP echo server answering 8 KB size-prefixed
# messages, measured by a client in another process that sleeps 1 ms between messages; first
# alone, then with a CPU-bound thread in the server process, then with the CPU work in a Ractor.
# Each syscall of the echo thread releases the GVL; getting it back from a CPU-bound thread takes
# up to a timeslice, so each message costs about (syscalls x timeslice).
require_relative "lab_helper"
include LabHelper

Warning[:experimental] = false
MESSAGE = 8192

CLIENT = LabHelper::CLIENT_PROLOGUE + <<~'RUBY'
  payload = "x" * 8192
  times = count.times.map do
    started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    socket.write([payload.bytesize].pack("N"), payload)
    header = socket.read(4)
    socket.read(header.unpack1("N"))
    elapsed = Process.clock_gettime(Process::CLOCK_MONOTONIC) - started
    sleep 0.001
    elapsed
  end
  socket.close
  puts JSON.generate(times)
RUBY

# Serves one client; counts the echo thread's syscalls (each one releases the GVL).
def echo_phase(server, messages)
  syscalls = 0
  echo = Thread.new do
    Thread.current.name = "echo"
    connection = server.accept
    loop do
      header = connection.sysread(4)
      syscalls += 1
      length = header.unpack1("N")
      payload = +""
      while payload.bytesize < length
        payload << connection.sysread(length - payload.bytesize)
        syscalls += 1
      end
      connection.syswrite(header + payload)
      syscalls += 1
    end
  rescue EOFError, IOError
    connection&.close
  end
  pid, _ready, output = spawn_helper(CLIENT, server.addr[1].to_s, messages.to_s)
  times = JSON.parse(output.read.lines.last)
  Process.wait(pid)
  echo.join
  syscalls -= 1 # the last sysread that saw the client close
  { per_message_ms: GVLScope::Units.median(times) * 1000, syscalls_per_message: syscalls.fdiv(messages) }
end

server = TCPServer.new("127.0.0.1", 0)
alone = echo_phase(server, size(tiny: 10, small: 50, full: 200))
say format("alone:              %8.2f ms per message (%.1f syscalls each)", alone[:per_message_ms], alone[:syscalls_per_message])
cpu = cpu_thread
beside = echo_phase(server, size(tiny: 3, small: 5, full: 20))
stop(cpu)
say format("beside a CPU thread: %8.2f ms per message (%.1f syscalls each)", beside[:per_message_ms], beside[:syscalls_per_message])
# Bounded: a Ractor cannot be told to stop, so it spins until a deadline well after the phase.
ractor_cpu = Ractor.new(now + size(tiny: 0.5, small: 1.5, full: 3.0)) do |deadline|
  x = 0
  x += 1 while Process.clock_gettime(Process::CLOCK_MONOTONIC) < deadline
  x
end
in_ractor = echo_phase(server, size(tiny: 10, small: 50, full: 200))
RactorResult.of(ractor_cpu)
say format("CPU in a Ractor:     %8.2f ms per message", in_ractor[:per_message_ms])
result(alone_ms: alone[:per_message_ms], beside_cpu_ms: beside[:per_message_ms], ractor_cpu_ms: in_ractor[:per_message_ms],
       syscalls_per_message: beside[:syscalls_per_message], timeslice_ms: timeslice_ms,
       priority: Integer(ENV.fetch("GVLSCOPE_LAB_PRIORITY", 0)), mn: ENV["RUBY_MN_THREADS"] == "1")
