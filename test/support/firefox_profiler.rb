# frozen_string_literal: true

require "cgi"
require "fileutils"
require "open3"
require "rbconfig"
require "socket"
require "uri"
require_relative "headless_chromium"

# The Firefox Profiler, the real viewer of the firefox export: the built app that the
# profile-viewer gem ships (a copy of profiler.firefox.com's front end, the one vernier's README
# points to), served on loopback and opened in headless Chromium at /from-url/<the profile>/, the
# way the profiler loads a profile from a URL. #open_in_firefox_profiler returns the text of the
# page it drew.
#
# The gem is installed once into the user's cache, outside the repository and shared by every
# checkout: ${XDG_CACHE_HOME:-~/.cache}/gvlscope/gems/profile-viewer-VERSION.
module FirefoxProfilerViewer
  include HeadlessChromium

  GEM = "profile-viewer"
  VERSION = "0.0.7"
  TYPES = { ".js" => "text/javascript", ".css" => "text/css", ".html" => "text/html", ".json" => "application/json",
            ".svg" => "image/svg+xml", ".png" => "image/png", ".wasm" => "application/wasm", ".map" => "application/json" }.freeze

  # The app's dist/ directory, installing the gem on first use. Fails the test when it cannot.
  def firefox_profiler_dist
    dir = File.join(ENV.fetch("XDG_CACHE_HOME", File.join(Dir.home, ".cache")), "gvlscope", "gems", "#{GEM}-#{VERSION}")
    dist = File.join(dir, "gems", "#{GEM}-#{VERSION}", "dist")
    return dist if File.exist?(File.join(dist, "index.html"))

    # Installed beside the final directory, then renamed: another checkout never sees half of it.
    staging = "#{dir}.#{Process.pid}"
    install = [RbConfig.ruby, "-S", "gem", "install", "--install-dir", staging, "--no-document", "--ignore-dependencies",
               GEM, "-v", VERSION]
    out, status = defined?(Bundler) ? Bundler.with_unbundled_env { Open3.capture2e(*install) } : Open3.capture2e(*install)
    assert status.success?, "gem install #{GEM} -v #{VERSION} failed:\n#{out}"
    FileUtils.mkdir_p(File.dirname(dir))
    begin
      File.rename(staging, dir)
    rescue Errno::EEXIST, Errno::ENOTEMPTY
      FileUtils.rm_rf(staging) # another run installed it first
    end
    dist
  end

  # The text of the profiler's page once it loaded +path+ and showed +view+ ("marker-table",
  # "calltree", ...) with +query+ ("thread=1"): tags dropped, one line per text node.
  def open_in_firefox_profiler(path, view, query = nil)
    dist = firefox_profiler_dist
    server = TCPServer.new("127.0.0.1", 0)
    port = server.addr[1]
    serving = Thread.new { loop { serve(server.accept, dist, path) } }
    profile = URI.encode_www_form_component("http://127.0.0.1:#{port}/profile.json")
    url = "http://127.0.0.1:#{port}/from-url/#{profile}/#{view}/#{"?#{query}" if query}"
    dom, log, status = chromium("--virtual-time-budget=30000", "--dump-dom", url)
    assert status.success?, log
    dom.gsub(/<[^>]*>/, "\n").lines(chomp: true).map { |line| CGI.unescapeHTML(line.strip) }.reject(&:empty?)
  ensure
    serving&.kill
    server&.close
  end

  private

  # One request: the profile, the app's index.html for any /from-url/ page, or a file of the app.
  def serve(client, dist, profile)
    request = client.gets.to_s
    nil while (line = client.gets) && line != "\r\n"
    path = URI.decode_www_form_component(request.split[1].to_s.split("?").first.to_s)
    file = if path == "/profile.json" then profile
           elsif path.start_with?("/from-url/") then File.join(dist, "index.html")
           else File.expand_path(File.join(dist, path))
           end
    if file.start_with?(dist) || file == profile
      body = File.file?(file) ? File.binread(file) : nil
    end
    if body
      type = file == profile ? "application/json" : TYPES.fetch(File.extname(file), "application/octet-stream")
      client.write("HTTP/1.1 200 OK\r\nContent-Type: #{type}\r\nContent-Length: #{body.bytesize}\r\nConnection: close\r\n\r\n")
      client.write(body)
    else
      client.write("HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
    end
  rescue SystemCallError, IOError
    nil # the browser went away
  ensure
    client.close
  end
end
