# frozen_string_literal: true

require_relative "../test_helper"

# Every benchmark the docs cite runs here at a tiny size: it must finish and print its table
# (numbers this small mean nothing, and none is checked). A benchmark nobody runs rots: one had
# failed at once on its first round (bench/overhead.rb) and one at its start (advisor_inputs.rb).
#
# Not here, and why: wait_truth.rb (and wait_truth_jobs.rb, its Sidekiq app) and wait_truth_load.rb
# run in test/integrations/wait_truth_test.rb, which checks their numbers against the clients';
# wait_truth_async_jobs.rb, its async job runner, in test/integrations/async_jobs_test.rb.
class BenchSmokeTest < Minitest::Test
  include GVLScopeTestHelper

  # name => [script and arguments, environment, what its table starts with]; all of them take
  # about six minutes on a loaded 2-core machine (the Sidekiq process under callgrind two of them), and
  # one APM recipe's two agent-loading Rubies under callgrind (routes_instructions_apm) about one more
  BENCHES = {
    "overhead" => [%w[bench/overhead.rb], { "CALLS" => "1000", "ROUNDS" => "2" }, /^\| run \| thread CPU time/],
    "stacks" => [%w[bench/stacks.rb], { "CALLS" => "1000", "ROUNDS" => "1", "SECONDS" => "0.2" }, /^- mixed workload/],
    "middleware" => [%w[bench/middleware.rb], { "N" => "1000", "ROUNDS" => "1" }, /^setup +ns\/call/],
    "ring_mappings" => [%w[bench/ring_mappings.rb], { "RINGS" => "50,100", "THIRD" => "100" }, /^\| traced \| \d+ \| 100 \|/],
    "report" => [%w[bench/report.rb], { "EVENTS" => "20000", "ONLY" => "report" }, /^\| trace \| events \| command/],
    "report_html_passes" => [%w[bench/report_html_passes.rb], { "EVENTS" => "20000", "FINDINGS" => "2", "WINDOW" => "0.005s..0.006s" },
                             /engine passes/],
    "live" => [%w[bench/live.rb 1 2], {}, /^host wake-up late, 1 snapshot\/s: +max +[\d.]+ ms/],
    "term_loop" => [%w[bench/term_loop.rb 1], {}, /^traced 1 rounds, 0 hangs/],
    "advisor_inputs" => [%w[bench/advisor_inputs.rb io-heavy 2 1 live], {}, /^ +live: GVL run [\d.]+, wait/],
    "web" => [%w[bench/web.rb], { "ROUNDS" => "1", "DURATION" => "1", "SETUPS" => "plain" }, /^plain +\d+ +100\.0%/],
    # under callgrind: a Ruby a row, seconds each at these sizes
    "instructions" => [%w[bench/instructions.rb], { "CALLS" => "200" }, /^\| mode \| instructions \| extra per event/],
    "routes_instructions" => [%w[bench/routes_instructions.rb], { "CALLS" => "100", "SETUPS" => "bare,no_routes" },
                              /^\| setup \| instructions per call/],
    # a docs/apm.md recipe with its real agent gem, its on_request block read from the doc (as every
    # agent's pair reads its own): one agent, the lightest to load, as each costs a minute or more here
    "routes_instructions_apm" => [%w[bench/routes_instructions.rb], { "CALLS" => "20", "SETUPS" => "honeybadger_recipe" },
                                  /^\| honeybadger_recipe \| \d+ \|/],
    "web_instructions" => [%w[bench/web_instructions.rb], { "REQUESTS" => "20", "WARMUP" => "5", "ROUNDS" => "1", "SETUPS" => "plain,metrics" },
                           /^\| setup \| instructions per request/],
    # a Sidekiq process under callgrind against a real Redis: about two minutes even this small
    "sidekiq_instructions" => [%w[bench/sidekiq_instructions.rb], { "JOBS" => "20", "CALLS" => "100", "ROUNDS" => "1" },
                               /^\| job \| plain \| with GVLScope::Sidekiq/],
    "fuzz_cli" => [%w[bench/fuzz_cli.rb], { "TRACES" => "3", "SNAPSHOTS" => "3" }, /^\| inputs \| mutated \| commands run/],
    "report_html" => [%w[bench/report_html.rb], { "THREADS" => "20", "EVENTS" => "100000", "RUNS" => "1" }, /^Chromium \(headless, 1 runs\)/],
    "autorun_boot" => [%w[bench/autorun_boot.rb], { "RUNS" => "2" }, /^autorun, --metrics-only +[\d.]+ ms CPU/],
    "cpu_samples" => [%w[bench/cpu_samples.rb], { "THREADS" => "1,2", "SECONDS" => "0.3" }, /^\| threads \| seconds \| samples/],
    "fiber_instructions" => [%w[bench/fiber_instructions.rb], { "SWITCHES" => "2000" }, /^\| mode \| instructions \| extra per switch/],
  }.freeze
  CALLGRIND = %w[instructions routes_instructions routes_instructions_apm web_instructions sidekiq_instructions fiber_instructions].freeze

  BENCHES.each do |name, (command, env, table)|
    define_method("test_#{name}_runs_tiny") do
      skip "wrk is not installed (script/test installs it)" if %w[web term_loop].include?(name) && !system("command -v wrk >/dev/null")
      skip "valgrind is not installed (script/test installs it)" if CALLGRIND.include?(name) && !system("command -v valgrind >/dev/null")
      skip "redis-server is not installed (script/test installs it)" if name == "sidekiq_instructions" && !system("command -v redis-server >/dev/null")
      skip "chromium is not installed (script/test installs it)" if name == "report_html" && !system("command -v chromium >/dev/null")
      out, err, status = run_process([RbConfig.ruby, "-I", File.join(ROOT, "lib"), *command], env: env, chdir: ROOT,
                                     timeout: 600) # a loaded machine: minutes, not the seconds a quiet one takes
      assert status.success?, "#{command.join(' ')}: #{status.inspect}\n#{out}\n#{err}"
      assert_match table, out, "#{command.join(' ')} printed no table:\n#{out}\n#{err}"
    end
  end

  # Every bench/ script the docs name is run above, or said above why not.
  def test_every_benchmark_the_docs_cite_is_smoked_or_excused
    cited = (["README.md"] + Dir[File.join(ROOT, "docs/*.md")].map { |doc| doc.delete_prefix("#{ROOT}/") })
            .flat_map { |doc| File.read(File.join(ROOT, doc)).scan(%r{\bbench/(\w+)\.rb}).flatten }.uniq
    excused = %w[wait_truth wait_truth_jobs wait_truth_load wait_truth_async_jobs]
    assert_operator cited.size, :>=, 10, cited.inspect
    assert_empty cited - BENCHES.keys - excused, "cited in the docs, run nowhere"
  end
end
