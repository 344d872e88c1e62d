# frozen_string_literal: true

require "json"
require "net/http"
require "socket"
require_relative "process_group"

# A real Prometheus server for the tests that scrape gvlscope's series with it
# (test/integrations/prometheus_server_test.rb, test/integrations/yabeda_test.rb): Debian's
# `prometheus` (script/test installs it), a temporary config and data directory under @dir, a free
# loopback port, a scrape a second. Included in a Minitest::Test that sets @dir.
module PrometheusServer
  WAIT = 60 # seconds for each thing awaited (a loaded 2-core machine boots servers slowly)

  def self.available? = system("command -v prometheus >/dev/null 2>&1")

  # Prometheus scraping +target+ ("host:port", /metrics) as job +job+, evaluating +rules+ (a rules
  # file) if given. On a free loopback port (asked of the kernel, then given to Prometheus: should
  # another process take it in between, Prometheus exits and we try another). Returns the port.
  def start_prometheus(target, job:, rules: nil)
    config = File.join(@dir, "prometheus.yml")
    File.write(config, <<~YAML)
      global:
        scrape_interval: 1s
        scrape_timeout: 1s
        evaluation_interval: 1s
      #{"rule_files:\n  - #{rules}" if rules}
      scrape_configs:
        - job_name: #{job}
          static_configs:
            - targets: ["#{target}"]
    YAML
    3.times do |attempt|
      port = TCPServer.open("127.0.0.1", 0) { |server| server.addr[1] }
      log = File.join(@dir, "prometheus-#{attempt}.log")
      pid = Process.spawn("prometheus", "--config.file=#{config}", "--storage.tsdb.path=#{File.join(@dir, "data-#{attempt}")}",
                          "--web.listen-address=127.0.0.1:#{port}", out: log, err: %i[child out], pgroup: true)
      @prometheus = [pid, log, port]
      ready = await("Prometheus ready") do
        next :exited if Process.waitpid(pid, Process::WNOHANG)

        begin
          Net::HTTP.get_response(URI("http://127.0.0.1:#{port}/-/ready")).code == "200"
        rescue SystemCallError, IOError, Net::ReadTimeout
          false
        end
      end
      return port unless ready == :exited

      @prometheus = nil # exited: its port was taken, perhaps

      flunk "prometheus did not start:\n#{File.read(log)}" if attempt == 2
    end
  end

  def stop_prometheus
    pid, = @prometheus
    return unless pid

    ProcessGroup.stop(pid, grace: 20)
  end

  # Polls the block every 0.2 s until it answers truthy (returned), up to WAIT seconds.
  def await(what)
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + WAIT
    loop do
      result = yield
      return result if result

      if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
        flunk "#{what}: not in #{WAIT} s#{"\nprometheus: #{File.read(@prometheus[1])[-3000..]}" if @prometheus}"
      end
      sleep 0.2
    end
  end

  # Prometheus' HTTP API: the answer's data (its status asserted).
  def api(path, **params)
    uri = URI("http://127.0.0.1:#{@prometheus[2]}#{path}")
    uri.query = URI.encode_www_form(params)
    body = JSON.parse(Net::HTTP.get_response(uri).body)
    assert_equal "success", body["status"], "#{path} #{params}: #{body}"
    body["data"]
  end

  # A sample value or bound as Prometheus writes it ("+Inf", "NaN" are not Ruby's spellings).
  def number(text) = { "+Inf" => Float::INFINITY, "Inf" => Float::INFINITY, "-Inf" => -Float::INFINITY, "NaN" => Float::NAN }.fetch(text) { Float(text) }
end
