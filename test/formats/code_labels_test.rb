# frozen_string_literal: true

require "test_helper"
require "tmpdir"
require "zlib"
require "gvlscope/cli"

# Issue 37: code reads the same in every output as in the text report, through one function
# (Model::Frame#shown: Vocabulary.code_label and Vocabulary.short_site). The recorded Puma trace
# names a method defined in config.ru "#<Rack::Builder:0x00007f…>.burn" and Puma's files by their
# whole path in the gem cache; the HTML flame graph, folded stacks, speedscope, Firefox and pprof
# printed both raw.
class CodeLabelsTest < Minitest::Test
  include GVLScopeTestHelper

  PUMA = File.join(ROOT, "test/fixtures/traces/puma.gvl")

  # +code+: :stacks for an output of whole stacks (the block of config.ru that calls burn
  # among them), :top for one of the holders' and release sites' rows, nil for one without code.
  def assert_code_as_the_text_report_names_it(bytes, name, code:)
    bytes = bytes.b
    refute_match(/0x\h{6,}/n, bytes, "#{name}: an object's address")
    refute_match(%r{/gems/}n, bytes, "#{name}: a whole path into the gem cache")
    return unless code

    assert_includes bytes, "Rack::Builder#burn".b, name
    assert_match(%r{(?<![\w/])puma-8\.0\.2/lib/puma/}n, bytes, "#{name}: gem-relative")
    assert_includes bytes, "block (3 levels) in ".b, "#{name}: \"block in\" is kept" if code == :stacks
  end

  def test_every_output_names_code_as_the_text_report
    text, err, status = gvlscope_in_process("report", PUMA)
    assert_equal 0, status, err
    assert_code_as_the_text_report_names_it(text, "report", code: :top)
    { "json" => :top, "markdown" => :top, "html" => :stacks }.each do |format, code|
      out, err, status = gvlscope_in_process("report", PUMA, "--format", format)
      assert_equal 0, status, err
      assert_code_as_the_text_report_names_it(out, "report --format #{format}", code: code)
    end
    Dir.mktmpdir("gvlscope-labels") do |dir|
      { "folded" => :stacks, "speedscope" => :stacks, "firefox" => :stacks, "pprof" => :stacks, "chrome-json" => nil,
        "perfetto" => nil }.each do |format, code|
        path = File.join(dir, format)
        _out, err, status = gvlscope_in_process("export", PUMA, "--format", format, "-o", path)
        assert_equal 0, status, err
        bytes = File.binread(path)
        bytes = Zlib.gunzip(bytes) if format == "pprof"
        assert_code_as_the_text_report_names_it(bytes, "export --format #{format}", code: code)
      end
    end
    [%w[summary], %w[advise], %w[advise --json]].each do |command, *options|
      out, err, status = gvlscope_in_process(command, PUMA, *options)
      assert_equal 0, status, err
      assert_code_as_the_text_report_names_it(out, [command, *options].join(" "), code: nil)
    end
  end
end
