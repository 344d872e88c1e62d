# frozen_string_literal: true

# Ground truth under continuous traffic (issue 36): bench/wait_truth.rb's servers driven by wrk
# with a mixed load while a probe client sends quick requests, and what each client measured
# beside what gvlscope said.
#
#   bundle exec ruby -Ilib bench/wait_truth_load.rb [--servers puma8-single,rails-cluster]
#                    [--concurrency 4,16,32] [--seconds 10] [--seed N]
#
# Servers (all by default): puma{8,7}-{single,cluster} (test/fixtures/web/app.ru under Puma 8, the
# bundle's, or 7, gemfiles/puma7.gemfile) and rails-{single,cluster} (test/fixtures/rails/config.ru
# under Puma 8); 5 threads, cluster mode with 2 workers.
#
# Per server, on one boot:
# - alone: each probe kind ALONE_PROBES times with nothing else running; the median is that kind's
#   latency alone. Then wrk at concurrency 8 with quick requests only: gvlscope's gvl-wait p50 and
#   p99 for requests with no CPU neighbour.
# - per concurrency C: wrk with C keep-alive connections (bench/wait_truth_load.lua), CPU_SHARE of
#   its requests burning CPU_MS of CPU, the rest quick; meanwhile the probe client sends quick
#   requests one at a time, in turn: on a new connection (fresh), on a persistent Net::HTTP session
#   (keepalive), and CURL_URLS on one curl connection (curl-fresh: the first, curl-keepalive: the
#   rest; curl's own %{time_total} per URL). A probe's added latency is its latency less its kind's
#   median alone; it was delayed when that is DELAYED_MS or more. Its coverage: (gvl-wait + the parts
#   of queue that are not the GVL's: queue-threads, queue-cpu) / added latency. wrk's quick requests are
#   measured alike against the keep-alive probe's median alone.
# - every response (probes' and wrk's, quick or CPU) is checked against the physical invariants
#   (WaitTruth.broken_invariants): gvl-wait <= queue + app time <= client latency.
#
# Targets (issue 36): coverage >= 0.8 for >= 9 of 10 delayed requests, fresh and keep-alive;
# Σ (gvl-wait + queue-threads + queue-cpu) / Σ added latency within 0.8-1.1; no broken invariant; alone,
# gvl-wait p50 < 0.5 ms.
require "open3"
require_relative "wait_truth"

module WaitTruth
  module Load
    SERVERS = %w[puma8-single puma8-cluster puma7-single puma7-cluster rails-single rails-cluster].freeze
    CONCURRENCIES = [4, 16, 32].freeze
    THREADS = 5
    WORKERS = 2
    CPU_MS = 20
    CPU_SHARE = 0.2
    ALONE_PROBES = 10
    ALONE_CONCURRENCY = 8
    ALONE_SECONDS = 4
    CURL_URLS = 4
    PROBE_PAUSE = (0.02..0.08) # between probes: a user's requests come at no fixed rhythm
    PROBE_KINDS = %w[fresh keepalive curl-fresh curl-keepalive].freeze
    LUA = File.join(__dir__, "wait_truth_load.lua")
    # A curl transfer's line: its time (s), the connections it opened, its status.
    CURL_FORMAT = "%{time_total} %{num_connects} %{http_code}\\n"

    # One run: a server at one concurrency (0: alone); samples carry extra[:kind] (a probe kind,
    # wrk-quick or wrk-cpu); alone_ms: each probe kind's median latency alone.
    Run = Struct.new(:server, :concurrency, :load_average, :samples, :alone_ms, keyword_init: true)

    module_function

    def web_server(name, dir)
      name =~ /\A(puma[78]|rails)-(single|cluster)\z/ or raise ArgumentError, "unknown server #{name.inspect}"
      workers = Regexp.last_match(2) == "cluster" ? WORKERS : 0
      if Regexp.last_match(1) == "rails"
        [WebServer.new(gemfile: GEMFILES.fetch("puma8"), rackup: RAILS_APP, threads: THREADS, workers: workers, dir: dir,
                       wait_entries: WAIT_ENTRIES, env: { "RAILS_ENV" => "production" }), "/cpu?ms="]
      else
        [WebServer.new(gemfile: GEMFILES.fetch(Regexp.last_match(1)), rackup: WEB_APP, threads: THREADS, workers: workers,
                       dir: dir, wait_entries: WAIT_ENTRIES), "/cpu?cpu_ms="]
      end
    end

    def load_average = File.read("/proc/loadavg").split.first(3).join(" ")

    # The server's runs: alone (concurrency 0: wrk at ALONE_CONCURRENCY, quick only), then each
    # concurrency under the mixed load with the probe beside it.
    def measure(name, concurrencies:, seconds:, seed:, dir:, alone_probes: ALONE_PROBES, alone_seconds: ALONE_SECONDS)
      web, path = web_server(name, dir)
      web.start(path)
      web.warm_up(path)
      rng = Random.new(seed)
      alone_ms = alone_latencies(web, alone_probes)
      runs = [Run.new(server: name, concurrency: 0, load_average: load_average, alone_ms: alone_ms,
                      samples: wrk(web, dir, ALONE_CONCURRENCY, alone_seconds, seed, cpu_path: web.quick_path))]
      concurrencies.each do |concurrency|
        average = load_average
        probes = nil
        session = web.warm_session
        prober = Thread.new { probes = probe_until(web, session, rng, WaitTruth.clock + seconds - 0.5) }
        samples = wrk(web, dir, concurrency, seconds, seed, cpu_path: "#{path}#{CPU_MS}", share: CPU_SHARE)
        prober.join
        session.finish
        runs << Run.new(server: name, concurrency: concurrency, load_average: average, alone_ms: alone_ms,
                        samples: probes + samples)
      end
      [web.description, runs]
    ensure
      web&.stop
    end

    def alone_latencies(web, probes)
      session = web.warm_session
      samples = Array.new(probes) { probe_round(web, session) }.flatten
      PROBE_KINDS.to_h { |kind| [kind, GVLScope::Units.median(samples.select { |s| s.extra[:kind] == kind }.map(&:latency_ms))] }
    ensure
      session&.finish
    end

    def probe_until(web, session, rng, deadline)
      samples = []
      while WaitTruth.clock < deadline
        samples.concat(probe_round(web, session))
        sleep rng.rand(PROBE_PAUSE)
      end
      samples
    end

    # One probe of each kind, one after the other.
    def probe_round(web, session)
      fresh = web.timed_get(web.quick_path)
      keepalive = web.timed_get(web.quick_path, session)
      fresh.extra[:kind] = "fresh"
      keepalive.extra[:kind] = "keepalive"
      [fresh, keepalive, *curl(web)]
    end

    # CURL_URLS quick requests on one curl connection; curl's time per URL, Server-Timing from
    # the headers it dumped (in the transfers' order).
    def curl(web)
      url = "http://127.0.0.1:#{web.port}#{web.quick_path}"
      headers, lines, status = Dir.mktmpdir("wait-truth-curl") do |dir|
        dump = File.join(dir, "headers")
        out, err, status = Open3.capture3("curl", "-s", "-D", dump, "-w", CURL_FORMAT,
                                          *Array.new(CURL_URLS) { ["-o", "/dev/null", url] }.flatten)
        raise "curl: #{status} #{err}" unless status.success?

        [File.read(dump).split(%r{^(?=HTTP/)}), out.lines, status]
      end
      raise "curl: #{lines.size} transfers, #{headers.size} header blocks (#{status})" unless lines.size == headers.size

      lines.zip(headers).map do |line, block|
        seconds, connects, code = line.split
        raise "curl GET #{url}: #{code}" unless code == "200"

        parts = WaitTruth.server_timing(block[/^server-timing:\s*(.*)$/i, 1])
        Sample.new(latency_ms: Float(seconds) * 1000, wait_ms: parts.fetch("gvl-wait", Float::NAN), parts: parts,
                   extra: { kind: connects == "0" ? "curl-keepalive" : "curl-fresh" })
      end
    end

    # wrk at +concurrency+ keep-alive connections (one per thread) for +seconds+; every response
    # as a Sample (kind wrk-quick or wrk-cpu).
    def wrk(web, dir, concurrency, seconds, seed, cpu_path:, share: 0.0)
      out_dir = File.join(dir, "wrk-#{concurrency}-#{share}")
      FileUtils.mkdir_p(out_dir)
      out, status = Open3.capture2e("wrk", "-t", concurrency.to_s, "-c", concurrency.to_s, "-d", "#{seconds}s",
                                    "--timeout", "30s", "-s", LUA, "http://127.0.0.1:#{web.port}/",
                                    "--", out_dir, seed.to_s, web.quick_path, cpu_path, share.to_s)
      raise "wrk: #{status}\n#{out}" unless status.success?

      Dir[File.join(out_dir, "wrk-*.tsv")].flat_map { |file| File.readlines(file, chomp: true) }.map do |line|
        path, code, latency_ms, timing = line.split("\t", 4)
        raise "wrk GET #{path}: #{code}\n#{web.log}" unless code == "200"

        parts = WaitTruth.server_timing(timing)
        Sample.new(latency_ms: Float(latency_ms), wait_ms: parts.fetch("gvl-wait", Float::NAN), parts: parts,
                   extra: { kind: path == web.quick_path ? "wrk-quick" : "wrk-cpu" })
      end
    end

    # The figures of one kind of request in one run.
    module Table
      module_function

      def ms(value) = WaitTruth::Table.ms(value)

      def percentile(values, q) = values.empty? ? nil : values.sort[[(values.size * q).ceil - 1, 0].max]

      HEADER = ["server", "C", "load", "requests", "kind", "n", "delayed", "added p50", "added p90", ">= 0.8",
                "coverage p50", "Σ ratio", "unnamed p50", "outside p50", "gvl-wait p50", "gvl-wait p99", "broken"].freeze

      # The baseline of a kind: wrk's quick requests go on kept-alive connections.
      def alone_ms(run, kind) = run.alone_ms.fetch(kind == "wrk-quick" ? "keepalive" : kind, nil)

      def rows(run)
        kinds = run.concurrency.zero? ? %w[wrk-quick] : [*PROBE_KINDS, "wrk-quick", "wrk-cpu"]
        kinds.map do |kind|
          samples = run.samples.select { |sample| sample.extra[:kind] == kind }
          row(run, kind, samples)
        end
      end

      def row(run, kind, samples)
        alone = alone_ms(run, kind)
        delayed = run.concurrency.zero? || alone.nil? ? [] : samples.select { |s| s.latency_ms - alone >= DELAYED_MS }
        added = delayed.map { |s| s.latency_ms - alone }
        coverage = delayed.map { |s| WaitTruth.named_wait_ms(s.parts) / (s.latency_ms - alone) }
        waits = samples.map { |s| s.parts.fetch("gvl-wait", 0.0) }
        broken = samples.count { |s| !WaitTruth.broken_invariants(s.parts, s.latency_ms).empty? }
        ratio = added.sum.positive? ? delayed.sum { |s| WaitTruth.named_wait_ms(s.parts) } / added.sum : nil
        unnamed = delayed.map { |s| unnamed_queue_ms(s.parts) }
        outside = delayed.map { |s| outside_server_ms(s) }
        [run.server, run.concurrency.zero? ? "alone #{ALONE_CONCURRENCY}" : run.concurrency.to_s, run.load_average,
         run.concurrency.zero? ? "quick" : "mixed", kind, samples.size.to_s, delayed.size.to_s,
         ms(percentile(added, 0.5)), ms(percentile(added, 0.9)),
         delayed.empty? ? "-" : "#{coverage.count { |c| c >= TARGET }}/#{delayed.size}",
         coverage.empty? ? "-" : format("%.2f", percentile(coverage, 0.5)), ratio ? format("%.2f", ratio) : "-",
         ms(percentile(unnamed, 0.5)), ms(percentile(outside, 0.5)),
         format("%.2f", percentile(waits, 0.5) || Float::NAN), format("%.1f", percentile(waits, 0.99) || Float::NAN),
         "#{broken}/#{samples.size}"]
      end

      # The part of queue that no entry names: neither the GVL's nor a free thread's (the server's
      # own Ruby, and time the machine kept its threads off a core).
      def unnamed_queue_ms(parts) = parts.fetch("queue", 0.0) - parts.fetch("queue-gvl", 0.0) - parts.fetch("queue-threads", 0.0) -
                                    parts.fetch("queue-cpu", 0.0)

      # What the client waited beyond the request's time at the server (from its arrival: queue, or
      # loop-wait, and the app): the client's own process and the kernel's work on the way, which
      # grow when the machine has more runnable threads than cores (load average above 2 here).
      def outside_server_ms(sample)
        parts = sample.parts
        sample.latency_ms - [parts.fetch("queue", 0.0), parts.fetch("loop-wait", 0.0)].max - WaitTruth.app_ms(parts)
      end

      # The delayed probes whose coverage is under TARGET (at most +limit+ per run), with their parts.
      def missed(run, out, limit: 3)
        return if run.concurrency.zero?

        found = run.samples.select do |s|
          alone = alone_ms(run, s.extra[:kind])
          PROBE_KINDS.include?(s.extra[:kind]) && alone && s.latency_ms - alone >= DELAYED_MS &&
            WaitTruth.named_wait_ms(s.parts) < TARGET * (s.latency_ms - alone)
        end
        found.first(limit).each do |s|
          out.puts "  missed (#{run.server} C=#{run.concurrency}, #{s.extra[:kind]}): client #{ms(s.latency_ms)} ms, alone " \
                   "#{ms(alone_ms(run, s.extra[:kind]))} ms, #{s.parts.map { |n, v| "#{n} #{ms(v)}" }.join(', ')}; " \
                   "outside the server #{ms(outside_server_ms(s))} ms"
        end
      end

      # Each broken response (at most +limit+ per run): its kind, latency and parts.
      def broken(run, out, limit: 5)
        found = run.samples.filter_map do |s|
          names = WaitTruth.broken_invariants(s.parts, s.latency_ms)
          [s, names] unless names.empty?
        end
        found.first(limit).each do |s, names|
          out.puts "  broken (#{run.server} C=#{run.concurrency}, #{s.extra[:kind]}): #{names.join(', ')}; client " \
                   "#{ms(s.latency_ms)} ms, #{s.parts.map { |n, v| "#{n} #{ms(v)}" }.join(', ')}"
        end
        out.puts "  (#{found.size - limit} more broken)" if found.size > limit
        over = found.map { |s, _names| s.parts.fetch("queue", 0.0) + WaitTruth.app_ms(s.parts) - s.latency_ms }
        return if over.empty?

        out.puts "  C=#{run.concurrency}: queue + app - client over the broken: p50 #{ms(percentile(over, 0.5))} ms, " \
                 "p90 #{ms(percentile(over, 0.9))} ms, max #{ms(over.max)} ms"
      end
    end

    def main(argv, out = $stdout)
      servers = SERVERS
      concurrencies = CONCURRENCIES
      seconds = 10
      seed = Random.new_seed % 100_000
      parser = OptionParser.new do |opts|
        opts.banner = "Usage: bundle exec ruby -Ilib bench/wait_truth_load.rb [--servers a,b] [--concurrency 4,16,32] " \
                      "[--seconds N] [--seed N]"
        opts.on("--servers LIST", Array, "servers to run (default all): #{SERVERS.join(', ')}") { |list| servers = list }
        opts.on("--concurrency LIST", Array, "wrk's connections per run (default #{CONCURRENCIES.join(',')})") do |list|
          concurrencies = list.map { |c| Integer(c) }
        end
        opts.on("--seconds N", Integer, "each wrk run's length (default 10)") { |n| seconds = n }
        opts.on("--seed N", Integer, "the probes' and wrk's random seed (default random, printed)") { |n| seed = n }
      end
      begin
        parser.parse!(argv)
      rescue OptionParser::ParseError, ArgumentError => e
        abort "wait_truth_load: #{e.message}\n#{parser.banner}"
      end
      unknown = servers - SERVERS
      abort "wait_truth_load: unknown server #{unknown.join(', ')}; servers: #{SERVERS.join(', ')}" unless unknown.empty?
      abort "wait_truth_load: --seconds must be at least 2" unless seconds >= 2
      abort "wait_truth_load: --concurrency must be at least 1" unless concurrencies.all?(&:positive?)
      # wrk -v exits 1; system answers nil only when there is no wrk to run.
      abort "wait_truth_load: wrk is not installed (script/test installs it)" if system("wrk", "-v", out: File::NULL, err: File::NULL).nil?

      out.puts "wait_truth_load: Ruby #{RUBY_VERSION}, #{Etc.nprocessors} CPUs, seed #{seed}, " \
               "#{Time.now.utc.strftime('%Y-%m-%d %H:%M UTC')}; mix: #{(CPU_SHARE * 100).round} % of wrk's requests " \
               "burn #{CPU_MS} ms of CPU; #{THREADS} threads; cluster: #{WORKERS} workers"
      rows = servers.flat_map do |server|
        Dir.mktmpdir("wait-truth-load") do |dir|
          started = WaitTruth.clock
          description, runs = measure(server, concurrencies: concurrencies, seconds: seconds, seed: seed, dir: dir)
          out.puts "== #{server}: #{description} (#{format('%.0f', WaitTruth.clock - started)} s); alone ms: " \
                   "#{runs.first.alone_ms.map { |kind, v| "#{kind} #{Table.ms(v)}" }.join(', ')}"
          runs.each { |run| Table.broken(run, out) }
          runs.each { |run| Table.missed(run, out) }
          runs.flat_map { |run| Table.rows(run) }
        end
      end
      out.puts "== summary (added: client latency - the kind's median alone, ms; delayed: added >= #{DELAYED_MS} ms; " \
               "coverage: (gvl-wait + queue-threads + queue-cpu) / added; unnamed: queue - queue-gvl - queue-threads - queue-cpu; " \
               "outside: client latency - (queue + app time), the client's and the kernel's share; broken: responses breaking an invariant)"
      WaitTruth::Table.print_rows(Table::HEADER, rows, out)
    rescue RuntimeError => e
      abort "wait_truth_load: #{e.message}"
    end
  end
end

WaitTruth::Load.main(ARGV) if $PROGRAM_NAME == __FILE__
