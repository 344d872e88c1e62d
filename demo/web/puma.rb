# frozen_string_literal: true

# docs/web.md's example Puma config: 2 workers (WORKERS=0: single mode) of 5 threads, GVL stats every 10 s per worker,
# /metrics on 127.0.0.1:9394 (one series per worker).
workers Integer(ENV.fetch("WORKERS", 2))
threads 5, 5
bind "tcp://127.0.0.1:9292"
rackup File.expand_path("config.ru", __dir__)

plugin :gvlscope
gvlscope log_interval: 10, prometheus_port: 9394
