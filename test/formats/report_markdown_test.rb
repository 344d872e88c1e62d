# frozen_string_literal: true

require_relative "../test_helper"
require "stringio"
require "gvlscope/cli"
require "gvlscope/analysis"
require "gvlscope/support/printable"
require_relative "../support/scripted_timeline"

# `gvlscope report --format markdown` (Formats::ReportMarkdown), read back by a GitHub-flavoured
# Markdown parser (commonmarker: comrak, GitHub's dialect): its tables parse with the report's
# numbers in them, and thread names that hold Markdown, HTML, backticks, pipes or a newline come
# out as the names, never as markup. The exact output of the fixture traces is pinned by
# test/engine/golden_test.rb (test/fixtures/traces/expected/*.report.md).
class ReportMarkdownTest < Minitest::Test
  include GVLScopeTestHelper

  TRACES = File.join(ROOT, "test/fixtures/traces")
  HOG = "h|<script>alert(1)</script>*`x`_[y](z) @here #1"
  VICTIM = "v`` | **b** &amp;\n<img src=x onerror=alert(2)>`"

  def setup
    require "commonmarker"
  rescue LoadError
    skip "commonmarker is not installed (bundle install: it is in the Gemfile's test group)"
  end

  def cli(*args) = gvlscope_in_process(*args)

  def parse(markdown) = Commonmarker.parse(markdown, options: { extension: { table: true } })

  def nodes(node, type) = [].tap { |found| node.walk { |n| found << n if n.type == type } }

  # The plain text of a node: its text and code spans' content, as a reader sees them.
  def text_of(node)
    String.new.tap do |out|
      node.walk { |n| out << n.string_content if %i[text code].include?(n.type) }
    end
  end

  # Each table as rows of cells' text, the header first.
  def tables(document)
    nodes(document, :table).map { |table| nodes(table, :table_row).map { |row| nodes(row, :table_cell).map { |cell| text_of(cell) } } }
  end

  def test_the_tables_parse_with_the_reports_numbers
    markdown, err, status = Dir.chdir(TRACES) { cli("report", "hog.gvl", "--format", "markdown") }
    assert_equal 0, status, err
    report = GVLScope::Analysis::Report.new(GVLScope::Model.timeline(File.join(TRACES, "hog.gvl")))
    document = parse(markdown)
    threads, holders, sites = tables(document)
    assert_equal ["thread", "run", "wait", "idle", "gc", "longest wait", "holds", "waits", "released by"], threads.first
    rows = report.rows.sort_by { |row| -row.wait_ns }
    assert_equal rows.size + 1, threads.size
    rows.zip(threads.drop(1)).each do |row, cells|
      assert_equal 9, cells.size, cells.inspect
      assert_equal [GVLScope::Vocabulary.thread_display_name(row.label, row.created_at), GVLScope::Units.ms(row.run_ns),
                    GVLScope::Units.ms(row.wait_ns), row.holds.to_s, row.waits.to_s],
                   cells.values_at(0, 1, 2, 6, 7)
    end
    code = report.code_locations
    assert_equal [%w[share code at], ["100.0%", "Counter#spin", "hog.rb:8"]], holders
    assert_equal code.release_sites.size + 1, sites.size
    assert_equal ["452.5 ms", "4", "io", "IO#write", "hog.rb:20", "echo"], sites[1]
    # The findings are a numbered list, each with its fix; code locations are code spans.
    list = nodes(document, :list).first
    assert_equal report.findings.size, nodes(list, :item).count { |item| nodes(item, :list).any? }
    assert_includes nodes(list, :code).map(&:string_content), "Counter#spin"
    assert_includes text_of(list), "fix: it runs Ruby code without blocking"
    # Nothing is raw HTML but the <details> around the histograms.
    blocks = nodes(document, :html_block).map { |node| node.to_html(options: { render: { unsafe: true } }) }
    assert_equal 2, blocks.size
    assert_match(/\A<details><summary>Histograms: /, blocks.first)
    assert_equal "</details>\n", blocks.last
    assert_empty nodes(document, :html_inline)
  end

  # A hog and the thread in convoy behind it, both with hostile names.
  def hostile_report(hog = HOG, victim = VICTIM)
    events = [[0, hog, :started], [0, hog, :ready], [0, hog, :resumed], [0, victim, :started], [0, victim, :ready]]
    at = 0
    4.times do
      events.push([at + 100, hog, :suspended], [at + 100, hog, :ready], [at + 100, victim, :resumed],
                  [at + 101, victim, :suspended], [at + 101, hog, :resumed], [at + 110, victim, :ready])
      at += 101
    end
    events.push([at + 100, hog, :suspended], [at + 100, victim, :resumed], [at + 101, victim, :suspended])
    GVLScope::Analysis::Report.new(ScriptedTimeline.timeline(events, end_ms: at + 200))
  end

  def test_hostile_thread_names_are_shown_as_names_never_as_markup
    report = hostile_report
    assert_equal %i[long_hold convoy], report.findings.map(&:kind)
    markdown = GVLScope::Formats::ReportMarkdown.new(report).to_s
    document = parse(markdown)
    shown = [HOG, VICTIM].map { |name| GVLScope::Printable.text(name) } # the newline as \n: a row stays one line
    assert_equal 'v`` | **b** &amp;\n<img src=x onerror=alert(2)>`', shown.last

    # The table: one row per thread, nine cells each, the name whole in the first.
    threads = tables(document).first
    assert_equal 3, threads.size, markdown
    assert(threads.all? { |cells| cells.size == 9 }, threads.inspect)
    assert_equal shown.reverse, threads.drop(1).map(&:first)

    # The findings name both threads by their whole names, as code spans.
    list = nodes(document, :list).first
    spans = nodes(list, :code).map(&:string_content)
    assert_includes spans, shown.first
    assert_includes spans, shown.last
    assert_equal 2, nodes(list, :item).count { |item| nodes(item, :list).any? }

    # No markup came out of a name: no HTML, emphasis, link or image; rendered with raw HTML
    # allowed (so the escaping, not the renderer, keeps it out) there is no tag of theirs.
    %i[html_inline link image emph strong].each { |type| assert_empty nodes(nodes(document, :table).first, type), type }
    assert_empty nodes(list, :html_inline)
    assert_empty nodes(list, :link)
    html = Commonmarker.to_html(markdown, options: { extension: { table: true }, render: { unsafe: true } })
    refute_match(/<script|<img/, html)
    assert_includes html, "&lt;script&gt;alert(1)&lt;/script&gt;"
  end

  # Names that are not valid UTF-8 (invalid bytes, a terminal escape) are shown, invalid
  # bytes as U+FFFD and control characters escaped, as in the text report.
  def test_names_that_are_not_utf8
    hog = "h\xff\xfe|x".dup.force_encoding(Encoding::UTF_8)
    victim = "v\e]0;title\a\xff".dup.force_encoding(Encoding::UTF_8)
    markdown = GVLScope::Formats::ReportMarkdown.new(hostile_report(hog, victim)).to_s
    assert markdown.valid_encoding?
    threads = tables(parse(markdown)).first
    assert_equal ["v\\e]0;title\\a\uFFFD", "h\uFFFD\uFFFD|x"], threads.drop(1).map(&:first)
    spans = nodes(nodes(parse(markdown), :list).first, :code).map(&:string_content)
    assert_includes spans, "h\uFFFD\uFFFD|x"
    assert_includes spans, "v\\e]0;title\\a\uFFFD"
  end

  # Text that is not a name is escaped too: a file path full of Markdown is the path.
  def test_text_and_code_spans_escape_what_markdown_reads
    format = GVLScope::Formats::ReportMarkdown.new(nil)
    { "a`b" => "``a`b``", "`a" => "`` `a ``", "a``" => "``` a`` ```", " a" => "`  a `", "a|b" => "`a|b`" }.each do |string, span|
      assert_equal span, format.__send__(:code, string)
      assert_equal string, text_of(parse(span)), span
    end
    assert_equal "`a\\|b`", format.__send__(:code, "a|b", table: true)
    hostile = "*a* _b_ [c](d) <e> &amp; `f` | ~g~ RUBY_THREAD_TIMESLICE \\"
    escaped = format.__send__(:text, hostile)
    assert_includes escaped, "RUBY_THREAD_TIMESLICE"
    document = parse(escaped)
    assert_equal hostile, text_of(document)
    types = [].tap { |found| document.walk { |n| found << n.type } }.uniq
    assert_empty types - %i[document paragraph text escaped], "only text: #{types}"
  end

  # docs/report.md shows the output of the fixture as it is (the start of the pinned file).
  def test_the_docs_show_todays_output
    shown = File.read(File.join(ROOT, "docs/report.md"))[/^```markdown\n(.*?)^\.\.\.\n```$/m, 1]
    refute_nil shown, "docs/report.md has no ```markdown example ending in ..."
    pinned = File.read(File.join(TRACES, "expected/hog.report.md"))
    assert pinned.start_with?(shown), "docs/report.md's Markdown example is not today's output"
  end

  def test_cli_format_option
    _, err, status = Dir.chdir(TRACES) { cli("report", "hog.gvl", "--json", "--format", "markdown") }
    assert_equal 2, status
    assert_match(/--json is --format json/, err)
    json, err, status = Dir.chdir(TRACES) { cli("report", "hog.gvl", "--format", "json") }
    assert_equal 0, status, err
    assert_equal Dir.chdir(TRACES) { cli("report", "hog.gvl", "--json") }.first, json
    help, = cli("report", "--help")
    assert_match(/--format FORMAT/, help)
    assert_match(/markdown\s+GitHub-flavoured Markdown/, help)
  end
end
