# frozen_string_literal: true

# docs/web.md's example: /cpu burns 200 ms of CPU holding the GVL, /fast returns at once.
#   bundle exec puma -C demo/web/puma.rb
require "gvlscope/rack"

use GVLScope::Rack, log_wait_over_ms: 50,
                    flight_recorder: { seconds: 10, dir: "tmp/gvlscope", duration_over_ms: 150, wait_over_ms: 100 }

clock = -> { Process.clock_gettime(Process::CLOCK_MONOTONIC) }
run lambda { |env|
  if env["PATH_INFO"] == "/cpu"
    deadline = clock.call + 0.2
    x = 0
    x += 1 while clock.call < deadline
  end
  [200, { "content-type" => "text/plain" }, ["ok\n"]]
}
