# frozen_string_literal: true

require "test_helper"
require "stringio"
require "tmpdir"
require "gvlscope/cli"

class CLITest < Minitest::Test
  include GVLScopeTestHelper

  def test_version
    out, _err, status = gvlscope("--version")
    assert status.success?
    assert_equal "gvlscope #{GVLScope::VERSION}\n", out
  end

  def test_help
    out, _err, status = gvlscope("--help")
    assert status.success?
    assert_match(/\AUsage: gvlscope COMMAND/, out)
  end

  def test_unknown_command_fails_with_usage
    _out, err, status = gvlscope("frobnicate")
    assert_equal 2, status.exitstatus
    assert_match(/unknown command 'frobnicate'/, err)
  end
end

# Bad usage is one line and where to read more; errors are one line, said once; exports never
# overwrite a file unless asked and announce a big file before writing it.
class CLIUsageTest < Minitest::Test
  include GVLScopeTestHelper

  def test_usage_errors_are_one_line_with_where_to_look
    [[%w[frobnicate], /\Agvlscope: unknown command 'frobnicate' \(see gvlscope --help\)\n\z/],
     [%w[export x.gvl], /\Agvlscope: export needs --format .* \(see gvlscope export --help\)\n\z/],
     [%w[report --bogus], /\Agvlscope: invalid option: --bogus \(see gvlscope report --help\)\n\z/],
     [%w[advise], /\Agvlscope: advise needs one input: .* \(see gvlscope advise --help\)\n\z/],
     [%w[top], /\Agvlscope top: top needs one of PID, --url URL or -- COMMAND \(see gvlscope top --help\)\n\z/]].each do |args, message|
      out, err, status = gvlscope(*args)
      assert_equal 2, status.exitstatus, "#{args.join(' ')}: #{err}"
      assert_equal "", out
      assert_match message, err
    end
  end

  def test_an_error_that_names_gvlscope_is_not_prefixed_twice
    err = StringIO.new
    cli = GVLScope::CLI.new(out: StringIO.new, err: err)
    cli.stub(:summary, ->(_argv) { raise GVLScope::Error, "gvlscope top: something" }) do
      assert_equal 1, cli.run(%w[summary x.gvl])
    end
    assert_equal "gvlscope top: something\n", err.string
  end

  def test_summary_help_says_what_it_shows
    out, err, status = gvlscope("summary", "--help")
    assert status.success?, err
    assert_match(/^Each thread's GVL times in a trace: run \(holding it\), wait/, out)
  end

  def test_exports_do_not_overwrite_and_say_why_a_path_cannot_be_written
    Dir.mktmpdir("gvlscope-cli") do |dir|
      trace = File.join(dir, "t.gvl")
      trace_program(trace, "Thread.new { sleep 0.001 }.join")
      json = File.join(dir, "t.json")
      File.write(json, "mine")
      out, err, status = gvlscope("export", trace, "--format", "chrome-json")
      assert_equal [1, ""], [status.exitstatus, out]
      assert_equal "gvlscope: #{json} already exists: remove it, choose another -o, or add --force\n", err
      assert_equal "mine", File.read(json)

      _out, err, status = gvlscope("export", trace, "--format", "chrome-json", "--force")
      assert status.success?, err
      refute_equal "mine", File.read(json)

      missing = File.join(dir, "no", "such", "x.json")
      _out, err, status = gvlscope("export", trace, "--format", "chrome-json", "-o", missing)
      assert_equal 1, status.exitstatus
      assert_equal "gvlscope: cannot write #{missing}: No such file or directory (no directory #{File.dirname(missing)})\n", err
      _out, err, status = gvlscope("report", trace, "--html", missing)
      assert_equal 1, status.exitstatus
      assert_equal "gvlscope: cannot write #{missing}: No such file or directory (no directory #{File.dirname(missing)})\n", err
    end
  end

  def test_a_big_export_is_announced_with_its_size
    cli = GVLScope::CLI.new(out: StringIO.new, err: StringIO.new)
    chrome = GVLScope::Formats.fetch("chrome-json", command: "export")
    assert_nil cli.send(:export_size_hint, "t.json", chrome, 1000)
    events = 5_000_000
    hint = cli.send(:export_size_hint, "t.json", chrome, events)
    megabytes = (events * chrome.bytes_per_event / 1_048_576.0).round
    assert_equal "gvlscope: writing t.json: about #{megabytes} MB (5000000 events, ~#{chrome.bytes_per_event} bytes each " \
                 "as chrome-json; perfetto is the most compact)", hint
  end
end
