# frozen_string_literal: true

require "open3"

# Debian's Chromium, headless, for the tests whose real consumer is a browser page (the HTML
# report, the speedscope viewer). script/test installs it; without it these tests fail, unless
# GVLSCOPE_SKIP_BROWSER=1 says to skip them.
module HeadlessChromium
  PATH = %w[chromium chromium-browser google-chrome].flat_map do |name|
    ENV.fetch("PATH", "").split(File::PATH_SEPARATOR).map { |dir| File.join(dir, name) }
  end.find { |path| File.executable?(path) }

  # Loads +url+ in a 1400x1000 window; returns [stdout, stderr, status].
  def chromium(*args, url)
    unless PATH
      skip "no chromium" if ENV["GVLSCOPE_SKIP_BROWSER"] == "1"
      flunk "headless Chromium is needed: apt-get install chromium (script/test installs it), " \
            "or GVLSCOPE_SKIP_BROWSER=1 to skip"
    end
    # --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start.
    Open3.capture3(PATH, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                   "--window-size=1400,1000", *args, url)
  end
end
