# frozen_string_literal: true

require_relative "../test_helper"
require "tmpdir"

# Every snippet in README.md and docs/ works as written. A fenced ```ruby block is run according to
# the word after "ruby" in its fence:
#   (none)               a script, run in a fresh Ruby in an empty directory: exits 0, prints no error
#   config.ru            a Rack app: built with Rack::Builder, then serves one GET / (200, Server-Timing)
#   puma                 a Puma config: loaded by Puma::Configuration (the plugin's options checked)
#   gemfile              a Gemfile: evaluated by Bundler's DSL
#   rails-application    lines of config/application.rb: evaluated in a Rails::Application subclass
#   rails-initializer    an initializer: run in that app, which then serves a request through Rails
#   sidekiq              a Sidekiq initializer: loaded by the real Sidekiq CLI (a child process, a
#                        real redis-server on a free port), which then runs a job through
#                        GVLScope::Sidekiq
#   rails-apm            an APM recipe's Rails initializer (docs/apm.md): run in a Rails app with
#                        its ### section's agent, which then serves a request through Rails
# Shell commands (`gvlscope SUB --option`, in code blocks and code spans): SUB exists and each
# option appears in `gvlscope SUB --help`.
class DocsTest < Minitest::Test
  include GVLScopeTestHelper

  DOCS = ["README.md", *Dir["docs/*.md"].sort].freeze
  KINDS = [nil, "config.ru", "puma", "gemfile", "rails-application", "rails-initializer", "sidekiq", "rails-apm"].freeze
  Snippet = Struct.new(:file, :line, :kind, :code) do
    def where = "#{file}:#{line}"
  end

  def self.snippets
    @snippets ||= DOCS.flat_map do |doc|
      text = File.read(File.join(ROOT, doc))
      found = []
      text.scan(/^```ruby([^\n]*)\n(.*?)^```$/m) do |info, code|
        line = text[0, Regexp.last_match.begin(0)].count("\n") + 1
        found << Snippet.new(doc, line, info.strip.empty? ? nil : info.strip, code)
      end
      found
    end
  end

  ROOT = GVLScopeTestHelper::ROOT

  # The snippets of +kind+; none fails the test that asked (it would check nothing): a kind the
  # docs no longer have goes out of KINDS with its test.
  def snippets(kind)
    found = self.class.snippets.select { |snippet| snippet.kind == kind }
    refute_empty found, "no ```ruby #{kind} snippet in #{DOCS.join(', ')}: nothing to check"
    found
  end

  def test_every_snippet_has_a_known_kind
    assert_operator self.class.snippets.size, :>=, 10
    self.class.snippets.each { |snippet| assert_includes KINDS, snippet.kind, snippet.where }
  end

  def test_ruby_scripts_run
    snippets(nil).each do |snippet|
      Dir.mktmpdir("gvlscope-doc") do |dir|
        out, err, status = Open3.capture3(RbConfig.ruby, "-I", File.join(ROOT, "lib"), "-e", snippet.code, chdir: dir)
        assert status.success?, "#{snippet.where} failed:\n#{snippet.code}\n#{out}#{err}"
        refute_match(/Error|warning/, err, "#{snippet.where} printed an error")
      end
    end
  end

  # Writes the snippet as +file_name+ in an empty directory and runs +loader+ (Ruby code that
  # gets the file's path as PATH) in a fresh Ruby there; returns its stdout after asserting success.
  def load_snippet(snippet, file_name, loader)
    Dir.mktmpdir("gvlscope-doc") do |dir|
      path = File.join(dir, file_name)
      File.write(path, snippet.code)
      out, err, status = run_ruby("PATH = #{path.inspect}\nDir.chdir(#{dir.inspect})\n#{loader}")
      assert status.success?, "#{snippet.where}:\n#{snippet.code}\n#{err}"
      out
    end
  end

  # As a Rack server would: Rack::Builder reads the file, the app serves a request.
  def test_config_ru_files_build_and_serve
    snippets("config.ru").each do |snippet|
      out = load_snippet(snippet, "config.ru", <<~RUBY)
        require "rack"
        require "rack/mock_request"
        response = Rack::MockRequest.new(Rack::Builder.parse_file(PATH)).get("/")
        puts response.status, response.headers["server-timing"]
      RUBY
      status_line, timing = out.lines.map(&:strip)
      assert_equal "200", status_line, snippet.where
      assert_match(/gvl-wait;dur=[\d.]+/, timing.to_s, snippet.where)
    end
  end

  def test_puma_configs_load
    snippets("puma").each do |snippet|
      out = load_snippet(snippet, "puma.rb", <<~RUBY)
        require "puma"
        require "puma/configuration"
        config = Puma::Configuration.new(config_files: [PATH])
        config.clamp
        p config.options[:gvlscope]
      RUBY
      refute_equal "nil", out.strip, "#{snippet.where} sets up the gvlscope plugin"
    end
  end

  def test_gemfiles_evaluate
    snippets("gemfile").each do |snippet|
      out = load_snippet(snippet, "Gemfile", <<~RUBY)
        require "bundler"
        dsl = Bundler::Dsl.new
        dsl.eval_gemfile(PATH)
        puts dsl.dependencies.map(&:name)
      RUBY
      assert_includes out.lines.map(&:strip), "gvlscope", snippet.where
    end
  end

  # The application lines go inside a Rails::Application, the initializers run after it boots;
  # then one request goes through Rails: the middleware's header and the initializer's log line.
  def test_rails_snippets_run_in_a_rails_app
    application = snippets("rails-application")
    initializers = snippets("rails-initializer")

    out, err, status = run_ruby(<<~RUBY)
      require "action_controller/railtie"
      require "rack/mock_request"
      LOG = StringIO.new
      class DocsApp < Rails::Application
        config.load_defaults Rails::VERSION::STRING.to_f
        config.eager_load = false
        config.secret_key_base = "docs-test"
        config.hosts.clear
        config.logger = ActiveSupport::Logger.new(LOG)
        #{application.map(&:code).join("\n")}
        routes.append { get "/hello" => "hello#show" }
      end
      class HelloController < ActionController::Base
        def show = render(plain: "hello")
      end
      DocsApp.initialize!
      #{initializers.map(&:code).join("\n")}
      response = Rack::MockRequest.new(DocsApp).get("/hello")
      puts response.status, response.headers["server-timing"], DocsApp.middleware.first.inspect
      puts LOG.string
    RUBY
    assert status.success?, err
    lines = out.lines.map(&:strip)
    assert_equal "200", lines[0]
    assert_match(/gvl-wait;dur=/, lines[1])
    assert_match(/GVLScope::Rack/, lines[2], "the middleware comes first")
    assert(lines.any? { |line| line.match?(/\Agvl GET \/hello gvl_wait_ms=[\d.]+ /) }, out) unless initializers.empty?
    # The Railtie (docs/rails.md), loaded by the application lines' `require "gvlscope/rack"` after Rails.
    assert(lines.any? { |line| line.match?(/\ACompleted 200 OK in \d+ms \(.*\| GVL: [\d.]+ms \| GC: [\d.]+ms\)\z/) }, out)
    assert(lines.any? { |line| line.match?(/\Agvl payload HelloController#show gvl_wait_ms=[\d.]+ .* pickup_wait_ms=[\d.]+/) }, out) unless initializers.empty?
  end

  # Each APM recipe's Rails initializer in the Rails app of test/support/rails_apm_app.rb, with the
  # agent of the ### section it is in (its gems loaded as Bundler.require does), unconfigured:
  # the app boots, GVLScope::Rack is in its stack and answers a request with its header. That the
  # values reach the agent: test/integrations/apm_recipes_test.rb.
  def test_rails_apm_initializers_boot_and_serve
    require_relative "../support/rails_apm_app"
    snippets("rails-apm").each do |snippet|
      agent = File.read(File.join(ROOT, snippet.file)).lines.first(snippet.line).grep(/^### /).last.to_s.delete_prefix("### ").strip
      Dir.mktmpdir("gvlscope-doc") do |dir|
        path = RailsAPMApp.write(dir, agent, snippet.code)
        out, err, status = run_ruby(<<~RUBY, env: { "RAILS_ENV" => "production" })
          require "rack"
          require "rack/mock_request"
          Dir.chdir(#{dir.inspect})
          response = Rack::MockRequest.new(Rack::Builder.parse_file(#{path.inspect})).get("/r0")
          puts response.status, response.headers["server-timing"], Rails.application.middleware.map(&:name).include?("GVLScope::Rack")
        RUBY
        assert status.success?, "#{snippet.where} (#{agent}):\n#{snippet.code}\n#{err}#{RailsAPMApp.log(dir)}"
        status_line, timing, in_stack = out.lines.map(&:strip)
        assert_equal "200", status_line, "#{snippet.where}:\n#{RailsAPMApp.log(dir)}"
        assert_match(/gvl-wait;dur=[\d.]+/, timing.to_s, snippet.where)
        assert_equal "true", in_stack, snippet.where
      end
    end
  end

  # Each Sidekiq initializer as the Sidekiq CLI loads it (`sidekiq -r file`), against a real Redis:
  # one job runs, a second one finds the first in GVLScope::Breakdown (so the middleware ran) and
  # prints it in Sidekiq's log.
  def test_sidekiq_initializers_run_a_job
    require_relative "../support/redis_server"
    skip "redis-server is not installed (script/test installs it)" unless RedisServer.available?
    snippets("sidekiq").each do |snippet|
      Dir.mktmpdir("gvlscope-doc") do |dir|
        File.write(File.join(dir, "initializer.rb"), snippet.code)
        File.write(File.join(dir, "app.rb"), <<~RUBY)
          require "sidekiq"
          require_relative "initializer"
          class DocsJob
            include Sidekiq::Job
            def perform = nil
          end
          class DocsCheckJob
            include Sidekiq::Job
            def perform
              jobs = GVLScope::Breakdown.snapshot.select { |e| e.kind == :job }.map { |e| "\#{e.label}=\#{e.count}" }
              Sidekiq.logger.info("docs-check: \#{jobs.join(' ')}")
            end
          end
        RUBY
        redis = RedisServer.new
        log = File.join(dir, "sidekiq.log")
        pid = Process.spawn({ "REDIS_URL" => redis.url }, RbConfig.ruby, "-I", File.join(ROOT, "lib"), "-rbundler/setup", "-e",
                            'load Gem.bin_path("sidekiq", "sidekiq")', "--", "-r", File.join(dir, "app.rb"), "-c", "1",
                            chdir: dir, out: log, err: %i[child out], pgroup: true)
        begin
          redis.call("SADD", "queues", "default")
          %w[DocsJob DocsCheckJob].each do |klass|
            redis.call("LPUSH", "queue:default", %({"class":"#{klass}","args":[],"queue":"default","jid":"#{klass.downcase}","retry":false}))
            sleep 0.3 # in order: the check runs after the job
          end
          deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 60
          until File.read(log).include?("docs-check:") || Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
            break if Process.waitpid(pid, Process::WNOHANG)

            sleep 0.1
          end
          assert_match(/docs-check: .*DocsJob=1/, File.read(log), "#{snippet.where}:\n#{snippet.code}\n#{File.read(log)[0, 3000]}")
        ensure
          begin
            Process.kill(:KILL, -pid)
            Process.wait(pid)
          rescue Errno::ESRCH, Errno::ECHILD
            nil
          end
          redis.stop
        end
      end
    end
  end

  # README.md and docs/metrics.md show `gvlscope run --metrics-only` with its output: the lines
  # shown have the shape of what it prints today (digits aside), the process line, the totals and
  # the per-thread table's header.
  def test_metrics_only_is_shown_with_todays_output
    Dir.mktmpdir("gvlscope-doc") do |dir|
      _out, err, status = gvlscope("run", "--metrics-only", "--", RbConfig.ruby, "-e",
                                   "2.times.map { Thread.new { 200_000.times { |i| i * i } } }.each(&:join)", chdir: dir)
      assert status.success?, err
      shape = ->(line) { line.gsub(/\d+(\.\d+)?/, "0").squeeze(" ").sub(/\(.*\)\z/, "(PROGRAM)") }
      printed = err.lines(chomp: true)
      expected = [printed[0], printed[1], printed.find { |line| line.start_with?("thread ") }].map(&shape)
      %w[README.md docs/metrics.md].each do |doc|
        text = File.read(File.join(ROOT, doc))
        assert_includes text, "gvlscope run --metrics-only -- ", doc
        shown = text[/^```\n(gvlscope: GVL metrics of pid .*?)^```$/m, 1]
        refute_nil shown, "#{doc} shows no output of --metrics-only"
        lines = shown.lines(chomp: true)
        assert_equal expected, [lines[0], lines[1], lines.find { |line| line.start_with?("thread ") }].map(&shape), doc
      end
    end
  end

  # Files the docs point to exist (a moved file leaves no dangling path behind).
  def test_paths_named_in_docs_exist
    DOCS.each do |doc|
      File.read(File.join(ROOT, doc)).scan(%r{(?<![\w./-])((?:lib|ext|bench|research|test|lab|demo|script|docs)/[\w./-]*\w)}).flatten.uniq.each do |path|
        next if path.include?("*")

        assert File.exist?(File.join(ROOT, path)), "#{doc} names #{path}, which does not exist"
      end
    end
  end

  # Output shown in the docs has today's columns: a per-thread table's header (report, summary)
  # and a histogram's are the ones the formats print now.
  def test_tables_shown_in_docs_have_todays_columns
    require "gvlscope/formats/thread_table"
    require "gvlscope/formats/histogram_text"
    thread_header = GVLScope::Formats::ThreadTable.lines([]).first.squeeze(" ")
    histogram_header = GVLScope::Formats::HistogramText.lines("t", [1], time: true)[1].strip
    DOCS.each do |doc|
      lines = File.readlines(File.join(ROOT, doc), chomp: true)
      lines.each_with_index do |line, index|
        if line.match?(/\Athread\s.*released by\z/)
          assert_equal thread_header, line.squeeze(" "), "#{doc}:#{index + 1}: a thread table with other columns"
        elsif line.match?(/-{5,} Distribution -{5,}/) && lines[index - 1].match?(/\A(GVL hold time|wait for the GVL)/)
          assert_equal histogram_header, line.strip, "#{doc}:#{index + 1}: a histogram of times with other columns"
        end
      end
    end
  end

  # Where a doc shows a command: `$ gvlscope ...` in a fenced block (the rest of such a block is
  # output), a line of an indented code block, or a code span.
  def self.commands
    DOCS.flat_map do |doc|
      fence = nil
      File.readlines(File.join(ROOT, doc), chomp: true).flat_map do |line|
        if line.start_with?("```")
          fence = fence ? nil : line
          next []
        end
        shown = if fence then fence == "```ruby" || fence.start_with?("```ruby ") ? [] : line.scan(/^\$ (gvlscope .*)/).flatten
                elsif line.start_with?("    ") then line.scan(/^\s+(gvlscope .*)/).flatten
                else line.scan(/`(gvlscope [^`]*)`/).flatten
                end
        shown.map { |command| [doc, command] }
      end
    end
  end

  def test_shell_commands_exist_with_their_options
    helps = {}
    commands = self.class.commands
    assert_operator commands.size, :>=, 20
    commands.each do |doc, command|
      sub = command[/\Agvlscope ([a-z]+)/, 1] or next
      helps[sub] ||= begin
        out, err, status = gvlscope(sub, "--help")
        assert status.success?, "#{doc}: `#{command}`: no command #{sub}: #{err}"
        out
      end
      # Options before a `--` are gvlscope's; after it they are the traced program's.
      ours = command.split(/\s--\s/).first
      ours.scan(/(?<![\w-])--[a-z][a-z-]*/).each do |option|
        assert_includes helps[sub], option, "#{doc}: `#{command}`: gvlscope #{sub} has no #{option}"
      end
      # A format named is one the command offers (its --help lists Formats::REGISTRY's).
      ours.scan(/--format[ =]([a-z][a-z-]*)/).flatten.each do |format|
        assert_match(/\b#{format}\b/, helps[sub], "#{doc}: `#{command}`: gvlscope #{sub} has no format #{format}")
      end
    end
  end
end
