# frozen_string_literal: true

# The Puma the web benchmarks load: single mode, 5 threads (the issue's setup), loopback, any free
# port, test/fixtures/web/app.ru. Writes the config file and returns its path.
def write_puma_config(path, extra = "")
  File.write(path, <<~RUBY)
    bind "tcp://127.0.0.1:0"
    threads 5, 5
    workers 0
    environment "production"
    rackup #{File.expand_path('../test/fixtures/web/app.ru', __dir__).inspect}
    #{extra}
  RUBY
  path
end
