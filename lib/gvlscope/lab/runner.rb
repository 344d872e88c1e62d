# frozen_string_literal: true

require "json"
require "open3"
require "rbconfig"
require "fileutils"
require "tmpdir"
require_relative "../lab"
require_relative "../model"
require_relative "../analysis/report"
require_relative "../integrations/launch"
require_relative "../support/output_file"

module GVLScope
  module Lab
    # Runs one scenario on a chosen Ruby with the recorder loaded at boot (as `gvlscope run`
    # does), then reads its trace, asks the report for findings and judges the claims.
    class Runner
      Knobs = Struct.new(:ruby, :mn, :timeslice_ms, :priority, :size, keyword_init: true)
      Result = Struct.new(:scenario, :knobs, :ruby_description, :measured, :verdicts, :findings, :trace, :seconds,
                          :output, keyword_init: true)

      # Longest a scenario may stay silent before it is stopped (every loop in lab/ is bounded and
      # says what it did; this is for a Ruby that hangs). Silence, not the whole run: a scenario
      # that a busy machine slows down still finishes.
      SILENCE_LIMIT = { "tiny" => 120, "small" => 300, "full" => 1800 }.freeze
      # What a stopped scenario gets to stop what it started (its ensure blocks: Puma servers,
      # helpers) before it and its process group are killed; and what a finished scenario's
      # output gets to reach its end while a process it left behind holds the pipe.
      GRACE_SECONDS = 10

      # +force+: replace the scenario's earlier traces in +out_dir+ (without it they refuse the run).
      def initialize(knobs, out_dir:, echo: nil, silence_limit: SILENCE_LIMIT.fetch(knobs.size), force: false)
        @knobs = knobs
        @out_dir = File.expand_path(out_dir) # the scenario runs in ROOT: the paths it is given are whole
        @echo = echo # an IO that gets the scenario's output line by line, or nil
        @silence_limit = silence_limit
        @force = force
      end

      # A scenario's outputs in +out_dir+ are its traces, NAME-*.gvl (NAME-PID.gvl per traced
      # process, and any the scenario names so). Raises GVLScope::Error when an earlier one is
      # there and +force+ is not given: called for every scenario before the first runs.
      def check!(scenario)
        earlier = earlier_traces(scenario).first or return
        OutputFile.check!(earlier, force: @force, option: "-o")
      end

      # The traces are written in a private directory inside +out_dir+ and put in place only once
      # the run succeeded (OutputFile's rule); a run that fails or is interrupted leaves nothing.
      def run(scenario)
        check!(scenario)
        ruby = Rubies.resolve(@knobs.ruby)
        version = Rubies.version_of(ruby)
        ext_dir = Rubies.extension_for(ruby, version)
        FileUtils.mkdir_p(@out_dir)
        earlier = earlier_traces(scenario)
        # A new 0700 directory beside the traces' places (a rename, not a copy, puts them there):
        # the result read back is the scenario's, not a file or link planted at a guessable name.
        Dir.mktmpdir(".gvlscope-lab-", @out_dir) do |private_dir|
          result_path = File.join(private_dir, "#{scenario.name}.json")
          env = environment(scenario, ext_dir, result_path, private_dir)
          started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
          output, pid = execute(env, ruby, scenario)
          seconds = Process.clock_gettime(Process::CLOCK_MONOTONIC) - started
          raise Error, "lab #{scenario.name}: the scenario wrote no result (its output is above)" unless File.exist?(result_path)

          measured = JSON.parse(File.read(result_path), symbolize_names: true)
          measured[:rings] = measured[:rings].transform_keys(&:to_s) if measured[:rings]
          own = File.join(private_dir, "#{scenario.name}-#{pid}.gvl")
          report = Analysis::Report.new(Model.timeline(own)) if File.exist?(own)
          measured.merge!(scenario.from_trace.call(report.timeline, report)) if report && scenario.from_trace
          result = Result.new(scenario: scenario, knobs: @knobs, ruby_description: Rubies.description_of(ruby), measured: measured,
                              verdicts: scenario.claims.map { |claim| claim.judge(measured) }, findings: report&.findings || [],
                              seconds: seconds, output: output)
          placed = place_traces(private_dir)
          result.trace = File.join(@out_dir, File.basename(own)) if report
          (earlier - placed).each { |path| File.unlink(path) } # --force (check! refused them otherwise): this run's replace them
          result
        end
      end

      private

      def earlier_traces(scenario)
        Dir.glob(File.join(@out_dir, "#{scenario.name}-*.gvl")).sort
      end

      # Every trace of the run at its place in +out_dir+; returns their paths. One that cannot be
      # placed takes back those placed before it.
      def place_traces(private_dir)
        placed = []
        Dir.glob(File.join(private_dir, "*.gvl")).sort.each do |staged|
          path = File.join(@out_dir, File.basename(staged))
          OutputFile.place(staged, path, inputs: [], force: @force, option: "-o")
          placed << path
        end
        placed
      rescue Exception # rubocop:disable Lint/RescueException -- an Interrupt too: only this run's files go
        placed.each { |path| OutputFile.remove(path) }
        raise
      end

      def environment(scenario, ext_dir, result_path, private_dir)
        # A 64 KiB chunk per recording native thread: the ring's 11,000 threads need ~700 MB.
        Launch.environment(output: File.join(private_dir, "#{scenario.name}-%p.gvl"), load_path: [ext_dir],
                           buffer_mb: scenario.name == "ring" ? 1024 : nil).merge(
          "GVLSCOPE_LAB_RESULT" => result_path,
          "GVLSCOPE_LAB_SIZE" => @knobs.size,
          "GVLSCOPE_LAB_PRIORITY" => @knobs.priority.to_s,
          "RUBY_MN_THREADS" => @knobs.mn ? "1" : nil,
          "RUBY_THREAD_TIMESLICE" => @knobs.timeslice_ms&.to_s,
        )
      end

      def now = Process.clock_gettime(Process::CLOCK_MONOTONIC)

      # In its own process group, so that what it spawned (wrk, helpers) goes with it when it is
      # stopped; the runner leaving early (Ctrl-C) stops it too. Returns its output and pid.
      def execute(env, ruby, scenario)
        output = +""
        heard_at = now
        Open3.popen2e(env, ruby, scenario.path, chdir: ROOT, pgroup: true) do |stdin, out, waiter|
          stdin.close
          reader = Thread.new do
            out.each_line do |line|
              heard_at = now
              output << line
              @echo&.print("  #{line}")
            end
          rescue IOError
            nil # finish_reading closed the pipe: a process the scenario left behind still holds it
          end
          begin
            until waiter.join(1)
              next if now - heard_at < @silence_limit

              stop(waiter)
              finish_reading(reader, out)
              raise Error, "lab #{scenario.name}: no output for #{@silence_limit} s; stopped#{@echo ? '' : ":\n#{output}"}"
            end
            finish_reading(reader, out)
          ensure
            stop(waiter) if waiter.alive?
          end
          status = waiter.value
          raise Error, "lab #{scenario.name} failed (#{status}):\n#{output}" unless status.success?

          [output, waiter.pid]
        end
      end

      # TERM first (the scenario's ensure blocks stop the servers it started in their own process
      # groups), then KILL for whatever of its process group is left.
      def stop(waiter)
        signal(:TERM, waiter.pid)
        waiter.join(GRACE_SECONDS)
        signal(:KILL, -waiter.pid)
        waiter.join
      end

      def signal(name, pid)
        Process.kill(name, pid)
      rescue Errno::ESRCH, Errno::EPERM
        nil # gone already
      end

      # The reader ends at the pipe's end; a process the scenario left behind keeps it open, and
      # closing it here is then the reader's end (rescued there, not a thread's death).
      def finish_reading(reader, out)
        return if reader.join(GRACE_SECONDS)

        out.close
        reader.join
      end

    end

    # Which Ruby runs a scenario, and a build of gvlscope's extension for it.
    module Rubies
      module_function

      def resolve(choice)
        return RbConfig.ruby if choice.nil? || choice.empty?
        return choice if choice.include?("/") && File.executable?(choice)
        raise Error, "--ruby #{choice}: no executable there" if choice.include?("/")

        # A series (3.4) is whichever of its versions script/bootstrap built, the newest first.
        pattern = choice.count(".") == 1 ? "ruby-#{choice}.*" : "ruby-#{choice}"
        cache = File.join(ENV.fetch("XDG_CACHE_HOME", File.join(Dir.home, ".cache")), "gvlscope")
        built = Dir.glob(File.join(cache, pattern, "bin", "ruby")).select { |ruby| File.executable?(ruby) }
        newest = built.max_by { |ruby| Gem::Version.new(File.basename(File.dirname(ruby, 2)).delete_prefix("ruby-")) }
        return newest if newest

        raise Error, "--ruby #{choice}: Ruby #{choice} is not built yet; run script/bootstrap #{choice} (about 3 min), " \
                     "or pass --ruby /path/to/ruby"
      end

      def version_of(ruby)
        out, status = Open3.capture2(ruby, "-e", "print RUBY_VERSION")
        raise Error, "--ruby #{ruby}: it does not run (#{status})" unless status.success?

        out
      end

      def description_of(ruby) = Open3.capture2(ruby, "-e", "print RUBY_DESCRIPTION").first

      # The extension for +ruby+: lib/'s build when it loads there, or one compiled once under
      # tmp/lab-ext/VERSION-DIGEST (a checkout shares lib/ between Rubies).
      def extension_for(ruby, version)
        # lib/'s own build, when it loads in that Ruby (a checkout's build may be another Ruby's).
        lib = File.join(ROOT, "lib")
        _out, status = Open3.capture2e(ruby, "-I", lib, "-e", 'require "gvlscope"')
        return lib if status.success?

        # Keyed by the sources too: a build of older sources must not be picked up.
        require "digest"
        sources = Dir[File.join(ROOT, "ext/gvlscope/*.{c,h,rb}")].sort.map { |path| File.read(path) }.join
        dir = Lab.scratch("lab-ext", "#{version}-#{Digest::SHA256.hexdigest(sources)[0, 12]}")
        built = File.join(dir, "gvlscope", "gvlscope.so")
        return dir if File.exist?(built)

        build = File.join(dir, "build")
        FileUtils.mkdir_p(build)
        log, status = Open3.capture2e("#{ruby} #{File.join(ROOT, 'ext/gvlscope/extconf.rb')} && make", chdir: build)
        raise Error, "could not build gvlscope's extension for Ruby #{version}:\n#{log}" unless status.success?

        FileUtils.mkdir_p(File.dirname(built))
        # Whole or not at all: a copy cut short (Ctrl-C) would be loaded by every later run.
        OutputFile.write(built, force: true) { |io| IO.copy_stream(File.join(build, "gvlscope.so"), io) }
        dir
      end
    end
  end
end
