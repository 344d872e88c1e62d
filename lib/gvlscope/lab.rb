# frozen_string_literal: true

require "etc"
require "tmpdir"
require_relative "support/errors"
require_relative "support/private_dir"

module GVLScope
  # The lab: the published GVL experiments as scenarios that measure, on the Ruby at hand, the
  # numbers their authors published, and judge each claim. A scenario is a program under lab/
  # plus claims (lib/gvlscope/lab/scenarios.rb); Lab::Runner runs it traced and evaluates them.
  module Lab
    ROOT = File.expand_path("../..", __dir__)
    SIZES = %w[tiny small full].freeze

    # Where the lab writes traces and extension builds: tmp/ of a checkout, or (from an installed
    # gem, whose directory may be read-only) a directory of ours in the system's temporary directory.
    def self.scratch(*parts)
      File.join(File.writable?(ROOT) ? File.join(ROOT, "tmp") : private_tmp, *parts)
    end

    # /tmp/gvlscope-<uid>, refused (GVLScope::Error) when another user made it: the lab loads the
    # extension it builds there.
    def self.private_tmp = PrivateDir.ensure!(File.join(Dir.tmpdir, "gvlscope-#{Process.euid}"))

    # A published claim as a predicate over measured numbers. +holds+ gets the measured Hash and
    # returns true/false; +measured+ turns the numbers into the text shown beside +published+.
    # +tolerance+ says why the bounds are what they are.
    # +differs_because+ names the likely reasons when a measurement differs from the published one.
    Claim = Struct.new(:text, :published, :tolerance, :measured, :holds, :applies, :differs_because, keyword_init: true) do
      # -> Verdict. A claim that does not apply (a knob or a Ruby without the feature) or whose
      # numbers are missing is not judged, and says why.
      def judge(numbers)
        reason = applies&.call(numbers)
        return Verdict.new(self, :not_applicable, reason, nil) if reason.is_a?(String)

        shown = measured.call(numbers)
        Verdict.new(self, holds.call(numbers) ? :holds : :differs, shown, nil)
      rescue KeyError, NoMethodError, TypeError, ZeroDivisionError => e
        Verdict.new(self, :not_measured, nil, "#{e.class}: #{e.message}")
      end
    end

    Verdict = Struct.new(:claim, :status, :measured, :error) do
      def label
        { holds: "holds", differs: "DIFFERS", not_applicable: "n/a", not_measured: "not measured" }.fetch(status)
      end
    end

    # +from_trace+ (optional) adds numbers read from the scenario's own trace and report.
    # +threads+ (optional): the most threads it creates at each size, checked against
    # vm.max_map_count before it runs (lab/map_limit.rb).
    # +details+ (optional): the measured Hash -> Markdown lines shown after the claims (a table).
    Scenario = Struct.new(:name, :file, :summary, :source, :claims, :from_trace, :seconds, :threads, :details,
                          keyword_init: true) do
      def path = File.absolute_path?(file) ? file : File.join(ROOT, "lab", file)
    end

    @scenarios = {}

    class << self
      # The machine a result was measured on, as results name it.
      def machine = "#{Etc.nprocessors} cores, #{RUBY_PLATFORM}"

      # A run's knobs (Runner::Knobs) in words: "size small, M:N threads".
      def describe_knobs(knobs)
        list = ["size #{knobs.size}"]
        list << "M:N threads" if knobs.mn
        list << "timeslice #{knobs.timeslice_ms} ms" if knobs.timeslice_ms
        list << "priority #{knobs.priority}" if knobs.priority.to_i != 0
        list.join(", ")
      end

      # A result's details (Scenario#details: Markdown lines, a table of what it measured), or nil.
      def details(result)
        details = result.scenario.details or return nil
        return nil if result.measured[:skipped]

        details.call(result.measured)
      rescue KeyError, NoMethodError, TypeError, ArgumentError => e
        ["(details not shown: #{e.class}: #{e.message})"]
      end

      def define(name, file:, summary:, source:, seconds:, from_trace: nil, claims: [], threads: nil, details: nil)
        @scenarios[name] = Scenario.new(name: name, file: file, summary: summary, source: source, claims: claims,
                                        from_trace: from_trace, seconds: seconds, threads: threads, details: details)
      end

      def scenarios
        require_relative "lab/scenarios" if @scenarios.empty?
        @scenarios
      end

      def fetch(name)
        scenarios.fetch(name) do
          raise Error, "no lab scenario named #{name.inspect} (gvlscope lab list: #{scenarios.keys.join(', ')})"
        end
      end
    end
  end
end
