# frozen_string_literal: true

require "test_helper"
require "gvlscope/analysis"
require "gvlscope/cli"
require "gvlscope/formats/report_text"
require "gvlscope/formats/report_markdown"
require "gvlscope/formats/report_html"
require "gvlscope/formats/top_text"
require "gvlscope/live/rules"

# The kinds of finding are declared once (Rule.kind, gathered in Analysis::KINDS) and every
# output that lists kinds names each of them: a kind added to the registry without its output,
# or dropped from one, fails here.
class FindingKindsTest < Minitest::Test
  include GVLScopeTestHelper

  KINDS = GVLScope::Analysis::KINDS
  NO_FINDINGS_TRACE = File.join(ROOT, "test/fixtures/traces/mixed.gvl") # a trace without findings

  def no_findings_report
    report = GVLScope::Analysis::Report.new(GVLScope::Model.timeline(NO_FINDINGS_TRACE))
    assert_empty report.findings, "the fixture was chosen for having no finding"
    report
  end

  def test_each_kind_is_declared_once_with_a_title_and_a_legend
    declared = GVLScope::Analysis::RULES.flat_map(&:kinds)
    assert_equal declared.map(&:name).uniq, declared.map(&:name), "a kind declared twice"
    assert_equal KINDS.keys, declared.map(&:name)
    assert_equal KINDS.size, KINDS.each_value.map(&:title).uniq.size, "two kinds share a title"
    KINDS.each_value do |kind|
      refute_empty kind.title, kind.name
      refute_empty kind.legend, kind.name
      assert_includes [:about, :main_holder, nil], kind.holder, kind.name
    end
  end

  # Every kind a rule's source makes is one it declares (Rule#finding refuses the others too).
  def test_the_rules_make_only_declared_kinds
    made = Dir[File.join(ROOT, "lib/gvlscope/analysis/rules/*.rb")].flat_map { |path| File.read(path).scan(/\bkind: :(\w+)/).flatten }
    assert_equal KINDS.keys.map(&:to_s).sort, made.uniq.sort
    rule = Class.new(GVLScope::Analysis::Rule) { def initialize = nil }
    error = assert_raises(ArgumentError) { rule.new.send(:finding, kind: :convoy, about: [], explains_wait_ns: 0) }
    assert_match(/declares no finding kind :convoy/, error.message)
  end

  def test_the_live_rules_kinds_are_the_reports_and_tops_header_names_each
    live = GVLScope::Live::Rules::KINDS
    live.each { |kind| assert_same KINDS.fetch(kind.name), kind }
    made = File.read(File.join(ROOT, "lib/gvlscope/live/rules.rb")).scan(/\bfinding\(:(\w+)/).flatten
    assert_equal live.map(&:name).map(&:to_s).sort, made.uniq.sort
    header = GVLScope::Formats::TopText::FINDINGS_HEADER
    live.each { |kind| assert_includes header, kind.title }
  end

  def test_report_help_lists_every_kind_with_its_legend
    out, _err, status = gvlscope_in_process("report", "--help")
    assert_equal 0, status
    KINDS.each_value { |kind| assert_match(/^ +#{kind.name} +#{Regexp.escape(kind.legend)}$/, out) }
  end

  def test_a_report_without_findings_names_every_kind_in_text_markdown_and_html
    report = no_findings_report
    text = GVLScope::Formats::ReportText.new(report).to_s[/^No findings.*$/]
    markdown = GVLScope::Formats::ReportMarkdown.new(report).to_s[/^No findings.*$/]
    html = GVLScope::Formats::ReportHTML.new(report).send(:model)[:noFindings]
    KINDS.each_value do |kind|
      assert_includes text, kind.title
      assert_includes markdown, kind.title
      assert_includes html, kind.title
    end
  end

  # The HTML report shows a holder's profile for a finding by its kind's holder, no list of kinds.
  def test_the_html_report_knows_every_kinds_holder
    page = GVLScope::Formats::ReportHTML.new(no_findings_report)
    KINDS.each_value do |kind|
      finding = GVLScope::Analysis::Finding.new(kind: kind.name, about: ["worker 1"], threads: ["worker 1", "main"],
                                                evidence: { holders: { "main" => 1.0 } })
      holder = page.send(:holder_of, finding)
      case kind.holder
      when :about then assert_equal "worker 1", holder, kind.name
      when :main_holder then assert_equal "main", holder, kind.name
      else assert_nil holder, kind.name
      end
    end
  end

  # docs/report.md's table of findings and its JSON schema name every kind.
  def test_the_report_docs_list_every_kind
    docs = File.read(File.join(ROOT, "docs/report.md"))
    schema = docs[/^\| `findings` \| `\[\{kind: ([\w|]+),/, 1].to_s.split("|")
    KINDS.each_value do |kind|
      assert docs.match?(/^\| \*\*#{kind.name}\*\*/), "docs/report.md's table of findings has no #{kind.name}"
      assert_includes schema, kind.name.to_s, "docs/report.md's JSON schema has no #{kind.name}"
    end
  end
end
