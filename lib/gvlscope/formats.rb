# frozen_string_literal: true

require_relative "support/errors"

module GVLScope
  # Answers become bytes. Every output is a Format (formats/format.rb): built from its subject,
  # #write(io). This registry is what the CLI offers for `--format` and lists in `--help`; a new
  # output is one file in formats/ and one entry here.
  module Formats
    # name:      what the user types (`--format NAME`)
    # file:      formats/<file>.rb, loaded when the format is used
    # subject:   what it is built from: :timeline (a trace: Model::Scan), :report (Analysis::Report),
    #            :snapshot (Metrics::Snapshot series for Prometheus), :lab (lab results),
    #            :advice (Analysis::Advisor::Advice), :diff (Analysis::Diff)
    # command:   the CLI command that offers it (nil: used through the Ruby API only)
    # extension: the output file's default extension
    # stacks:    true when it shows only code locations (a trace without stacks is an error)
    # bytes_per_event: an export's size per trace event, for the size hint before a big export
    #            (measured on a 111,179-event trace of IO and CPU threads; folded stacks are per stack)
    Entry = Struct.new(:name, :class_name, :file, :subject, :command, :extension, :description, :stacks, :bytes_per_event,
                       keyword_init: true) do
      # The Format subclass, loaded on first use.
      def format_class
        require_relative "formats/#{file}"
        Formats.const_get(class_name)
      end
    end

    REGISTRY = [
      Entry.new(name: "perfetto", class_name: :Perfetto, file: "perfetto", subject: :timeline, command: "export",
                extension: ".pftrace", bytes_per_event: 57, description: "Perfetto protobuf trace: open in ui.perfetto.dev"),
      Entry.new(name: "chrome-json", class_name: :ChromeJSON, file: "chrome_json", subject: :timeline, command: "export",
                extension: ".json", bytes_per_event: 150, description: "Chrome trace event JSON: Perfetto UI, chrome://tracing (not speedscope)"),
      Entry.new(name: "speedscope", class_name: :Speedscope, file: "speedscope", subject: :timeline, command: "export",
                extension: ".speedscope.json", bytes_per_event: 81, description: "speedscope file: the holders' stacks (wait-weighted), then a timeline per thread"),
      Entry.new(name: "folded", class_name: :Folded, file: "folded", subject: :timeline, command: "export",
                extension: ".folded", stacks: true, bytes_per_event: 0, description: "folded stacks of the code that held the GVL while others waited: flamegraph.pl, inferno"),
      Entry.new(name: "pprof", class_name: :Pprof, file: "pprof", subject: :timeline, command: "export",
                extension: ".pb.gz", stacks: true, bytes_per_event: 0,
                description: "pprof profile: holders' stacks weighted by the wait they caused, release sites (go tool pprof, Pyroscope)"),
      Entry.new(name: "firefox", class_name: :Firefox, file: "firefox", subject: :timeline, command: "export",
                extension: ".firefox.json", bytes_per_event: 68,
                description: "Firefox Profiler profile: a track per thread, GVL states as markers, holder samples (profiler.firefox.com)"),
      Entry.new(name: "text", class_name: :ReportText, file: "report_text", subject: :report, command: "report",
                extension: ".txt", description: "findings, per-thread table and histograms (the default)"),
      Entry.new(name: "json", class_name: :ReportJSON, file: "report_json", subject: :report, command: "report",
                extension: ".json", description: "the report as JSON (schema: docs/report.md)"),
      Entry.new(name: "html", class_name: :ReportHTML, file: "report_html", subject: :report, command: "report",
                extension: ".html", description: "self-contained HTML report with a zoomable timeline"),
      Entry.new(name: "markdown", class_name: :ReportMarkdown, file: "report_markdown", subject: :report, command: "report",
                extension: ".md", description: "GitHub-flavoured Markdown for a pull request or an issue (docs/report.md)"),
      Entry.new(name: "summary", class_name: :SummaryText, file: "summary_text", subject: :timeline, command: "summary",
                extension: ".txt", description: "per-thread GVL times"),
      Entry.new(name: "metrics-text", class_name: :MetricsText, file: "metrics_text", subject: :snapshot, command: nil,
                extension: ".txt", description: "a metrics snapshot as a table and histograms"),
      Entry.new(name: "prometheus", class_name: :Prometheus, file: "prometheus", subject: :snapshot, command: nil,
                extension: ".prom", description: "Prometheus text exposition of metrics snapshots"),
      Entry.new(name: "top-text", class_name: :TopText, file: "top_text", subject: :live, command: nil,
                extension: ".txt", description: "one frame of gvlscope top: an interval of a live source"),
      Entry.new(name: "advice-text", class_name: :AdviceText, file: "advice_text", subject: :advice, command: "advise",
                extension: ".txt", description: "the thread-count advice with its reasoning (the default)"),
      Entry.new(name: "advice-json", class_name: :AdviceJSON, file: "advice_json", subject: :advice, command: "advise",
                extension: ".json", description: "the advice as JSON (schema: docs/advise.md)"),
      Entry.new(name: "text", class_name: :DiffText, file: "diff_text", subject: :diff, command: "diff",
                extension: ".txt", description: "the verdict, then A → B per process, thread, route and job, and the findings (the default)"),
      Entry.new(name: "json", class_name: :DiffJSON, file: "diff_json", subject: :diff, command: "diff",
                extension: ".json", description: "the diff as JSON (schema: docs/diff.md)"),
      Entry.new(name: "lab-text", class_name: :LabText, file: "lab_text", subject: :lab, command: "lab",
                extension: ".txt", description: "a lab result, as `gvlscope lab run` prints it"),
      Entry.new(name: "lab-markdown", class_name: :LabMarkdown, file: "lab_markdown", subject: :lab, command: "lab",
                extension: ".md", description: "lab results as Markdown (docs/lab.md)"),
    ].freeze

    module_function

    # The entries a CLI command offers, in registry order.
    def for_command(command) = REGISTRY.select { |entry| entry.command == command }

    def fetch(name, command: nil)
      entry = REGISTRY.find { |e| e.name == name && (command.nil? || e.command == command) }
      return entry if entry

      known = (command ? for_command(command) : REGISTRY).map(&:name)
      raise Error, "unknown format #{name.inspect} (known: #{known.join(', ')})"
    end

    # "  perfetto      Perfetto protobuf trace: ..." lines for a command's --help.
    def help(command)
      for_command(command).map { |entry| format("    %-13s %s (%s)", entry.name, entry.description, entry.extension) }
    end
  end
end

module GVLScope
  module Formats
    # GVLScope::Formats::Perfetto and the others load on first use.
    REGISTRY.each { |entry| autoload entry.class_name, File.expand_path("formats/#{entry.file}", __dir__) }
  end
end
