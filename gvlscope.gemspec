# frozen_string_literal: true

require_relative "lib/gvlscope/version"

Gem::Specification.new do |spec|
  spec.name = "gvlscope"
  spec.version = GVLScope::VERSION
  spec.authors = ["gvlscope developers"]
  spec.summary = "See and measure CRuby's Global VM Lock: a fast GVL tracer, always-on metrics and reports"
  spec.description = "A recorder on CRuby's GVL instrumentation API: GVL held %, wait times and histograms, " \
                     "per-thread timelines exported to Perfetto and Chrome JSON, a CLI and reports."
  spec.license = "MIT"
  spec.required_ruby_version = ">= #{GVLScope::MINIMUM_RUBY}"

  spec.files = Dir["lib/**/*.{rb,html,js}", "lab/*.rb", "ext/**/*.{c,h,rb}", "exe/*", "README.md", "LICENSE", "docs/*.md"]
  spec.bindir = "exe"
  spec.executables = ["gvlscope"]
  spec.require_paths = ["lib"]
  spec.extensions = ["ext/gvlscope/extconf.rb", "ext/gvlscope_engine/extconf.rb"]
end
