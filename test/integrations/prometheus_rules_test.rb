# frozen_string_literal: true

require_relative "../test_helper"

# contrib/prometheus/: the recording and alerting rules are valid Prometheus rules (`promtool
# check rules`) and do what docs/prometheus.md says (`promtool test rules`: input series as the
# Puma plugin exports them, the recorded values and the alerts expected). Debian's `prometheus`
# package brings promtool; script/test installs it.
class PrometheusRulesTest < Minitest::Test
  include GVLScopeTestHelper

  DIR = File.join(ROOT, "contrib/prometheus")

  def promtool(*args)
    skip "promtool is not installed (Debian's prometheus package: script/test installs it)" unless system("command -v promtool >/dev/null 2>&1")
    out, err, status = run_process(["promtool", *args], chdir: DIR)
    assert status.success?, "promtool #{args.join(' ')}:\n#{out}#{err}"
    out + err
  end

  def test_the_rules_are_valid
    out = promtool("check", "rules", "gvlscope.rules.yml")
    assert_match(/SUCCESS: \d+ rules found/, out)
  end

  def test_the_rules_unit_tests_pass
    assert_match(/SUCCESS/, promtool("test", "rules", "gvlscope.rules.test.yml"))
  end

  # The rules read only series gvlscope exports (a renamed metric would leave a rule silent).
  def test_the_rules_read_metrics_gvlscope_exports
    require "gvlscope/formats/prometheus"
    require "gvlscope/integrations/puma_plugin"
    exported = File.read(File.join(ROOT, "lib/gvlscope/formats/prometheus.rb")).scan(/"(gvlscope_[a-z_]+)"/).flatten
    exported += GVLScope::Formats::Prometheus::BREAKDOWN_KINDS.values.flat_map do |kind|
      %W[#{kind[:prefix]}_#{kind[:counter]}_total #{kind[:prefix]}_seconds_total #{kind[:prefix]}_gvl_wait_seconds]
    end
    exported << GVLScope::PumaPlugin::DROPPED
    rules = File.read(File.join(DIR, "gvlscope.rules.yml")).lines.grep_v(/\A\s*#/).join
    # Series read, not recorded (level:metric:operations names have colons around the metric).
    read = rules.scan(/(?<![:\w])(gvlscope_[a-z_]+)(?![:\w])/).flatten.uniq
    refute_empty read
    read.each do |name|
      base = name.sub(/_(bucket|sum|count)\z/, "")
      assert_includes exported, base, "the rules read #{name}, which gvlscope does not export"
    end
  end
end
