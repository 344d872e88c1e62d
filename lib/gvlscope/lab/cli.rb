# frozen_string_literal: true

require "optparse"
require_relative "../lab"
require_relative "../support/output_file"

module GVLScope
  module Lab
    # `gvlscope lab list | run NAME | all`.
    class CLI
      USAGE = <<~TEXT
        Usage: gvlscope lab list
               gvlscope lab run NAME [options] [--force]
               gvlscope lab all [options] [--write PATH | --no-write] [--force]   (default: docs/lab.md in a checkout, else ./gvlscope-lab.md)

        The published GVL experiments as scenarios: each runs traced on your Ruby, shows the measured
        numbers beside the published ones, and judges each claim (holds / DIFFERS / n/a). A claim that
        differs is a result, not an error: the exit status is 0 unless a scenario could not run.
      TEXT

      # Where traces go by default: under the current directory, never the installed gem's.
      TRACES_DIR = File.join("tmp", "lab")

      def initialize(out:, err:)
        @out = out
        @err = err
      end

      def run(argv)
        command = argv.shift
        case command
        when nil, "-h", "--help", "help" then @out.puts USAGE, options_parser({}).summarize; 0
        when "list" then list
        when "run"
          knobs = parse(argv) or return 0
          name = argv.shift or raise OptionParser::ParseError, "lab run needs a scenario NAME (gvlscope lab list)"
          raise OptionParser::ParseError, "lab run takes one NAME (got #{([name] + argv).join(' ')})" unless argv.empty?

          run_scenarios([Lab.fetch(name)], knobs)
          0
        when "all"
          # In a checkout: the results page the project ships; from an installed gem: the current directory.
          checkout_page = File.join(ROOT, "docs", "lab.md") if File.exist?(File.join(ROOT, ".git"))
          write = checkout_page || "gvlscope-lab.md"
          knobs = parse(argv) do |opts|
            opts.on("--write PATH", "write the results as Markdown here (default: docs/lab.md in a checkout)") { |p| write = p }
            opts.on("--no-write", "do not write Markdown") { write = nil }
          end
          return 0 unless knobs
          raise OptionParser::ParseError, "lab all takes no NAME (got #{argv.join(' ')})" unless argv.empty?

          # The checkout's results page is rewritten by design; any other file only with --force.
          force = knobs[:force] || (write && checkout_page && OutputFile.same_file?(write, checkout_page))
          OutputFile.check!(write, force: force, option: "--write") if write # before minutes of scenarios

          results = run_scenarios(Lab.scenarios.values, knobs)
          write_markdown(results, write, knobs, force: force) if write
          0
        else
          raise OptionParser::ParseError, "unknown lab command '#{command}' (list, run, all)"
        end
      end

      private

      def list
        Lab.scenarios.each_value do |scenario|
          @out.puts format("%-18s %s (~%d s at --size small)", scenario.name, scenario.summary, scenario.seconds)
        end
        0
      end

      def options_parser(knobs)
        OptionParser.new do |opts|
          opts.banner = ""
          opts.on("--ruby VERSION|PATH", "3.3, 3.4 (built by script/bootstrap) or a path (default: this Ruby)") { |r| knobs[:ruby] = r }
          opts.on("--mn", "M:N threads (RUBY_MN_THREADS=1)") { knobs[:mn] = true }
          opts.on("--timeslice MS", Integer, "thread timeslice (RUBY_THREAD_TIMESLICE, Ruby 3.4+)") { |ms| knobs[:timeslice_ms] = ms }
          opts.on("--priority N", Integer, "priority of the CPU-bound neighbour threads (-3..3)") { |n| knobs[:priority] = n }
          opts.on("--size SIZE", SIZES, "tiny, small (default: ~30 s or less each) or full") { |s| knobs[:size] = s }
          opts.on("-o", "--output DIR", "where traces go (default #{TRACES_DIR} under the current directory)") { |d| knobs[:out_dir] = d }
          opts.on("--force", "replace a scenario's earlier traces in DIR (NAME-*.gvl) and, for lab all, the --write file " \
                             "(a checkout's docs/lab.md, the default, is the lab's own page)") { knobs[:force] = true }
          opts.on("-h", "--help", "show this help") { @out.puts USAGE, opts.summarize; throw :help }
          yield opts if block_given?
        end
      end

      # The knobs, or nil after --help.
      def parse(argv, &extra)
        knobs = { size: "small" }
        catch(:help) do
          options_parser(knobs, &extra).parse!(argv)
          if knobs[:priority] && !(-3..3).cover?(knobs[:priority])
            raise OptionParser::ParseError, "--priority must be -3..3 (CRuby clamps thread priorities)"
          end
          if knobs[:timeslice_ms] && !knobs[:timeslice_ms].positive?
            raise OptionParser::ParseError, "--timeslice must be a positive number of ms"
          end
          return knobs
        end
        nil
      end

      def run_scenarios(scenarios, knobs)
        require_relative "runner"
        require_relative "../formats/lab_text"
        runner = Runner.new(Runner::Knobs.new(ruby: knobs[:ruby], mn: knobs[:mn], timeslice_ms: knobs[:timeslice_ms],
                                              priority: knobs[:priority] || 0, size: knobs[:size]),
                            out_dir: knobs[:out_dir] || File.expand_path(TRACES_DIR), echo: @out, force: knobs[:force])
        scenarios.each { |scenario| runner.check!(scenario) } # before minutes of scenarios, not after
        warn_timeslice(knobs)
        scenarios.map do |scenario|
          @out.puts "== lab #{scenario.name} (#{knobs[:size]})"
          warn_map_limit(scenario, knobs[:size])
          result = runner.run(scenario)
          @out.puts Formats::LabText.new(result).to_s, ""
          result
        end
      end

      # Said before the run, not found as CRuby's "[FATAL] failed to allocate memory" after it.
      def warn_map_limit(scenario, size)
        threads = scenario.threads&.fetch(size, nil) or return
        require_relative "map_limit"
        problem = MapLimit.problem(threads, in_use: 0) or return
        @err.puts "gvlscope lab: warning: #{problem} (rings that do not fit are skipped)"
      end

      def warn_timeslice(knobs)
        return unless knobs[:timeslice_ms]

        version = Rubies.version_of(Rubies.resolve(knobs[:ruby]))
        return if GVLScope.version_at_least?(version, "3.4")

        @err.puts "gvlscope lab: warning: Ruby #{version} ignores RUBY_THREAD_TIMESLICE (3.4+); claims assume it applies"
      end

      def write_markdown(results, path, knobs, force:)
        unless File.writable?(File.dirname(path))
          @err.puts "gvlscope lab: #{File.dirname(path)} is not writable; results not written (--write PATH)"
          return
        end

        flags = knobs.filter_map { |key, value| "--#{key.to_s.sub('_ms', '')} #{value}" unless %i[out_dir force].include?(key) || value.nil? }
        require_relative "../formats/lab_markdown"
        page = Formats::LabMarkdown.new(results, command: "gvlscope lab all #{flags.join(' ')}".strip).to_s
        OutputFile.write(path, force: force, option: "--write", text: true) { |io| io << page }
        @err.puts "gvlscope lab: wrote #{path}"
      end
    end
  end
end
