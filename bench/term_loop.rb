# frozen_string_literal: true

# Does Puma exit on TERM after a load run, traced as untraced? Rounds, one after another (the
# modes taking turns): start Puma 8 from the bundle (single mode, 5 threads, a hello-world
# config.ru), wait until it answers, wrk for 2 s, TERM, and time until the Puma process is gone (a
# hang is 20 s without it: its threads' kernel waits are printed, then it is killed). Traced, Puma runs under
# `gvlscope run --no-report` and TERM goes to gvlscope run, which passes it on, as a user's
# process manager would send it.
#
#   bundle exec ruby bench/term_loop.rb [ROUNDS] [both|plain|traced]   (default 50 rounds, both)
#
# Prints one line per round and a summary per mode: rounds, hangs, the longest and median exit.
require "socket"
require "tmpdir"
require "rbconfig"
require "etc"

rounds = Integer(ARGV.fetch(0, 50))
modes = ARGV.fetch(1, "both") == "both" ? %w[plain traced] : [ARGV[1]]
abort "modes: plain, traced, both" unless (modes - %w[plain traced]).empty?

ROOT = File.expand_path("..", __dir__)
HANG = 20.0 # seconds after TERM that count as a hang
BOOT = 60.0 # seconds Puma may take to answer (a loaded machine)

def now = Process.clock_gettime(Process::CLOCK_MONOTONIC)

def free_port = TCPServer.open("127.0.0.1", 0) { |server| server.addr[1] }

def answers?(port)
  TCPSocket.open("127.0.0.1", port).close
  true
rescue SystemCallError
  false
end

# The process that runs Puma: the pid itself, or (traced) gvlscope run's child.
def puma_pid(pid, traced)
  return pid unless traced

  File.read("/proc/#{pid}/task/#{pid}/children").split.map(&:to_i).first
rescue SystemCallError
  nil
end

def gone?(pid)
  !File.exist?("/proc/#{pid}") || File.read("/proc/#{pid}/stat").split(")").last.split[0] == "Z"
rescue SystemCallError
  true
end

# Where each thread of a hung process waits (name, state, kernel wait channel).
def threads_of(pid)
  Dir.glob("/proc/#{pid}/task/*").map do |task|
    name = File.read("#{task}/comm").strip
    state = File.read("#{task}/stat").split(")").last.split[0]
    wchan = File.read("#{task}/wchan") rescue "?"
    "#{File.basename(task)} #{name.inspect} #{state} #{wchan}"
  end
rescue SystemCallError
  []
end

def round(dir, traced)
  port = free_port
  puma = %W[bundle exec puma -b tcp://127.0.0.1:#{port} -t 5:5 -e production --silent #{File.join(dir, 'config.ru')}]
  command = traced ? [RbConfig.ruby, File.join(ROOT, "exe/gvlscope"), "run", "--no-report", "-o", File.join(dir, "trace-%p.gvl"), "--", *puma] : puma
  env = { "BUNDLE_GEMFILE" => File.join(ROOT, "Gemfile") }
  log = File.join(dir, "puma.log")
  pid = Process.spawn(env, *command, chdir: dir, out: log, err: log, pgroup: true)
  started = now
  sleep 0.05 until answers?(port) || now - started > BOOT || Process.wait(pid, Process::WNOHANG)
  raise "Puma did not answer on port #{port} within #{BOOT} s: #{File.read(log)[-500..]}" unless answers?(port)

  wrk = IO.popen(["wrk", "-c", "8", "-t", "1", "-d", "2", "http://127.0.0.1:#{port}/"], &:read)
  requests = wrk[/(\d+) requests in/, 1].to_i
  target = puma_pid(pid, traced)
  Process.kill("TERM", pid)
  termed = now
  sleep 0.01 until gone?(target) || now - termed > HANG
  exit_s = now - termed
  hung = !gone?(target)
  stacks = hung ? threads_of(target) : []
  begin
    Process.kill("KILL", -pid) if hung
  rescue Errno::ESRCH
    nil
  end
  # gvlscope run after Puma: bounded too (a hang there is counted as one).
  waited = now
  sleep 0.01 until Process.wait(pid, Process::WNOHANG) || now - waited > HANG
  if now - waited > HANG
    hung = true
    stacks << "gvlscope run still running #{HANG} s after Puma exited"
    Process.kill("KILL", -pid)
    Process.wait(pid)
  end
  Dir.glob(File.join(dir, "trace-*.gvl")).each { |path| File.unlink(path) }
  [requests, exit_s, hung, stacks]
end

Dir.mktmpdir("gvlscope-term-loop") do |dir|
  File.write(File.join(dir, "config.ru"), %(run ->(_env) { [200, { "content-type" => "text/plain" }, ["hello\\n"]] }\n))
  puts format("ruby %s, %d cores, load average %s, %d rounds per mode", RUBY_VERSION, Etc.nprocessors,
              File.read("/proc/loadavg").split.first(3).join(" "), rounds)
  # The modes take turns, so a change in the machine's load falls on both alike.
  results = modes.to_h { |mode| [mode, [[], 0]] }
  rounds.times do |index|
    modes.each do |mode|
      requests, exit_s, hung, stacks = round(dir, mode == "traced")
      results[mode][0] << exit_s
      results[mode][1] += 1 if hung
      puts format("%-6s round %3d: %6d requests, exit %.3f s%s", mode, index + 1, requests, exit_s, hung ? " HUNG" : "")
      stacks.each { |line| puts "    #{line}" }
      $stdout.flush
    end
  end
  results.each do |mode, (times, hangs)|
    sorted = times.sort
    puts format("%-6s %d rounds, %d hangs (> %d s), exit after TERM: median %.3f s, max %.3f s",
                mode, times.size, hangs, HANG, sorted[sorted.size / 2], sorted.last)
  end
end
