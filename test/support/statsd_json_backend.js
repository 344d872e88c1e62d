// A statsd backend for the tests (test/support/statsd_server.rb): after each flush, one line on
// stdout with what the real statsd server aggregated (counters, gauges), as JSON; and each UDP
// packet as the server received it. statsd's own console backend prints the same through
// util.inspect, which is not meant to be parsed.
exports.init = function (startupTime, config, events) {
  events.on('packet', function (packet) {
    process.stdout.write('GVLSCOPE_PACKET ' + JSON.stringify(packet.toString()) + '\n');
  });
  events.on('flush', function (timestamp, metrics) {
    process.stdout.write('GVLSCOPE_FLUSH ' + JSON.stringify({ counters: metrics.counters, gauges: metrics.gauges }) + '\n');
  });
  return true;
};
