# frozen_string_literal: true

require "test_helper"
require "gvlscope/formats/report_html"

# The HTML legend: every entry has its own name, and the greys (idle without a known reason, idle
# unknown, the zoomed-out summary's idle of any reason) can be told apart on screen.
class HTMLLegendTest < Minitest::Test
  VIEWER = File.read(GVLScope::Formats::ReportHTML::VIEWER)

  def colors
    table = VIEWER[/const COLORS = \{(.*?)\};/m, 1]
    table.scan(/(\w+): "(#\h{6})"/).to_h.merge("summary idle" => VIEWER[/const SUMMARY_IDLE = "(#\h{6})"/, 1])
  end

  def test_names_are_distinct
    report_html = GVLScope::Formats::ReportHTML.allocate
    names = GVLScope::Formats::ReportHTML::CODES.keys.map { |code| report_html.send(:label, code) }
    names << VIEWER[/const SUMMARY_IDLE_LABEL = "([^"]+)"/, 1]
    assert_equal names.uniq, names
  end

  def test_the_greys_differ_enough_to_be_told_apart
    rgb = ->(hex) { hex.delete("#").scan(/../).map { |part| part.to_i(16) } }
    greys = colors.slice("io_sleep", "unknown", "summary idle")
    assert_equal 3, greys.size, colors.inspect
    greys.to_a.combination(2).each do |(a, a_hex), (b, b_hex)|
      distance = rgb.(a_hex).zip(rgb.(b_hex)).map { |x, y| (x - y).abs }.max
      assert_operator distance, :>=, 30, "#{a} #{a_hex} and #{b} #{b_hex} look the same"
    end
  end
end
