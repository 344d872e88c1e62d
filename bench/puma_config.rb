# frozen_string_literal: true

# The Puma the web benchmarks load: single mode, 5 threads (the issue's setup), loopback, any free
# port, test/fixtures/web/app.ru (or +rackup+). Writes the config file and returns its path.
def write_puma_config(path, extra = "", rackup: File.expand_path("../test/fixtures/web/app.ru", __dir__))
  File.write(path, <<~RUBY)
    bind "tcp://127.0.0.1:0"
    threads 5, 5
    workers 0
    environment "production"
    rackup #{rackup.inspect}
    #{extra}
  RUBY
  path
end
