# frozen_string_literal: true

require "base64"
require "fileutils"
require "json"
require "tmpdir"
require_relative "headless_chromium"
require_relative "npm_package"

# speedscope, the real viewer of .speedscope.json files: its npm package (the built app in
# dist/release/) opened in headless Chromium, given a file the way its own CLI does
# (#localProfilePath= a script calling speedscope.loadFileFromBase64). test/support/speedscope_probe.js
# then reads what the app shows for each profile; #open_in_speedscope returns it.
#
# The package is installed once, by npm, into the user's cache (test/support/npm_package.rb).
module SpeedscopeViewer
  include HeadlessChromium

  # Pinned: the probe reads speedscope's DOM (toolbar "name (i/n)", the Sandwich table).
  VERSION = "1.25.0"
  PROBE = File.read(File.expand_path("speedscope_probe.js", __dir__))

  Weight = Struct.new(:text, :percent)
  Row = Struct.new(:name, :total, :self_weight)
  Profile = Struct.new(:name, :rows) do
    def row(name) = rows.find { |row| row.name == name }
  end
  # What speedscope showed: the page title, each profile's Sandwich rows, and what it logged
  # (errors: console.error, uncaught exceptions, alerts, "Failed to load format"; warnings: console.warn).
  Shown = Struct.new(:title, :profiles, :errors, :warnings, :log)

  # dist/release/index.html of the pinned package, installed on first use.
  def speedscope_app
    File.join(NpmPackage.ensure_installed(self, "speedscope", VERSION), "dist", "release", "index.html")
  end

  # Opens +path+ in speedscope as +name+ (speedscope picks the importer by the name's ending, as
  # for a file dropped on it); returns Shown. With +screenshot+, also saves a PNG of profile number
  # +show+ (0-based) in the Time Order view.
  def open_in_speedscope(path, name: File.basename(path), screenshot: nil, show: 0)
    app = speedscope_app
    Dir.mktmpdir("gvlscope-speedscope") do |dir|
      script = File.join(dir, "load.js")
      config = { name: name, data: Base64.strict_encode64(File.binread(path)), show: show }
      File.write(script, "var GVLSCOPE_PROBE = #{JSON.generate(config)};\n#{PROBE}")
      url = "file://#{app}#localProfilePath=#{script}&view=sandwich"
      # WebGL draws the flame chart; swiftshader is software WebGL, which Chromium wants asked for.
      browser = ["--enable-unsafe-swiftshader", "--virtual-time-budget=60000"]
      dom, log, status = chromium(*browser, "--dump-dom", url)
      assert status.success?, log
      encoded = dom[/data-gvlscope-probe="([^"]*)"/, 1]
      assert encoded, "the probe left no result: speedscope did not run it\n#{log}"
      shown = parse_shown(JSON.parse(Base64.decode64(encoded).force_encoding(Encoding::UTF_8)))
      if screenshot
        _out, log, status = chromium(*browser, "--screenshot=#{screenshot}", url)
        assert status.success?, log
      end
      shown
    end
  end

  private

  def parse_shown(json)
    profiles = json.fetch("profiles").map do |profile|
      rows = profile.fetch("rows").map do |row|
        Row.new(row.fetch("name"), Weight.new(*row.fetch("total").values_at("text", "percent")),
                Weight.new(*row.fetch("self").values_at("text", "percent")))
      end
      Profile.new(profile.fetch("name"), rows)
    end
    Shown.new(json.fetch("title"), profiles, *json.values_at("errors", "warnings", "log"))
  end
end
