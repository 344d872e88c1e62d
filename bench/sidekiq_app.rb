# frozen_string_literal: true

# The Sidekiq app of bench/sidekiq_instructions.rb, loaded by the Sidekiq CLI under callgrind.
# Jobs can switch GVLScope::Sidekiq in and out of the running process's middleware chain, so one
# process measures every setup (no difference between boots).
#
#   NoopJob          does nothing: Sidekiq's own cost per job
#   ReportJob        a realistic small job: builds 50 order rows, renders them with ERB, sums and
#                    JSON-encodes a summary, digests the text (about what a mailer or export job does)
#   SetupJob(name)   "plain": no gvlscope; "middleware": chain.add GVLScope::Sidekiq (stats_every: 60)
#   MarkJob(token)   pushes token to the Redis list "bench:marks": the jobs before it are done
require "sidekiq"
require "erb"
require "json"
require "digest"
require "gvlscope/sidekiq"

Sidekiq.configure_server do |config|
  config.redis = { url: ENV.fetch("REDIS_URL") }
end

class NoopJob
  include Sidekiq::Job

  def perform = nil
end

class ReportJob
  include Sidekiq::Job

  TEMPLATE = ERB.new(<<~ERB, trim_mode: "-")
    <h1>Orders for customer <%= customer %></h1>
    <table>
    <%- rows.each do |row| -%>
      <tr><td><%= row[:id] %></td><td><%= row[:sku] %></td><td><%= format("%.2f", row[:price]) %></td><td><%= row[:quantity] %></td></tr>
    <%- end -%>
    </table>
  ERB

  def perform(customer)
    rows = Array.new(50) { |i| { id: i, sku: "SKU-#{customer}-#{i}", price: (i * 7 % 13) + 0.99, quantity: i % 4 + 1 } }
    html = TEMPLATE.result_with_hash(customer: customer, rows: rows)
    summary = { customer: customer, total: rows.sum { |r| r[:price] * r[:quantity] }.round(2), lines: rows.size,
                digest: Digest::SHA256.hexdigest(html) }
    JSON.generate(summary)
  end
end

class SetupJob
  include Sidekiq::Job

  def perform(name)
    Sidekiq.default_configuration.capsules.each_value do |capsule|
      chain = capsule.server_middleware
      chain.remove(GVLScope::Sidekiq)
      chain.add(GVLScope::Sidekiq) if name == "middleware"
    end
    GC.start # every window starts from the same heap
  end
end

class MarkJob
  include Sidekiq::Job

  def perform(token) = Sidekiq.redis { |redis| redis.call("LPUSH", "bench:marks", token) }
end
