# frozen_string_literal: true

require "test_helper"
require "bigdecimal"
require "json"
require "tmpdir"
require "support/synthetic_trace"

# `gvlscope export --format firefox`: the Firefox Profiler's processed profile (version 48, which
# the profiler upgrades on load). Checked against the documented format (src/types/profile.ts of
# firefox-devtools/profiler: tables of columns of one length, indexes into the string array and
# the other tables in range, interval markers start <= end, instants without an end) and read back:
# each thread's markers sum, state by state, to the engine's per-thread totals, and its samples to
# the holder samples the engine kept. The profiler itself opens it in test/formats/firefox_profiler_test.rb.
# Run alone: bundle exec ruby -Ilib -Itest test/formats/firefox_test.rb
class FirefoxTest < Minitest::Test
  include GVLScopeTestHelper

  TRACES = File.join(ROOT, "test/fixtures/traces")
  # The columns each table has (profile.ts, processed format 48).
  COLUMNS = {
    "frameTable" => %w[address inlineDepth category subcategory func nativeSymbol innerWindowID implementation line column],
    "funcTable" => %w[name isJS relevantForJS resource fileName lineNumber columnNumber],
    "stackTable" => %w[frame category subcategory prefix],
    "samples" => %w[stack time weight],
    "markers" => %w[data name startTime endTime phase category],
    "resourceTable" => %w[lib name host type],
    "nativeSymbols" => %w[libIndex address name functionSize],
  }.freeze
  THREAD_KEYS = %w[name isMainThread processType processStartupTime registerTime pausedRanges pid tid stringArray].freeze

  def export(dir, trace)
    out = File.join(dir, "#{File.basename(trace, '.*')}.firefox.json")
    _stdout, err, status = gvlscope("export", File.join(TRACES, trace), "--format", "firefox", "-o", out)
    assert status.success?, err
    # Decimals as BigDecimal: the times are ms with up to 6 decimals, exact in ns.
    JSON.parse(File.read(out), decimal_class: BigDecimal)
  end

  def assert_valid_profile(profile, where)
    meta = profile.fetch("meta")
    assert_equal 28, meta["version"], where
    assert_equal 48, meta["preprocessedProfileVersion"], where
    %w[interval startTime categories markerSchema].each { |key| assert meta.key?(key), "#{where}: meta.#{key}" }
    categories = meta["categories"]
    assert categories.any? { |category| category["color"] == "grey" }, "#{where}: a grey (default) category"
    categories.each { |category| refute_empty category["subcategories"], where }
    schemas = meta["markerSchema"].to_h { |schema| [schema["name"], schema] }
    threads = profile.fetch("threads")
    refute_empty threads
    assert_equal [], profile["libs"]
    assert_equal threads.each_index.to_a, meta["initialVisibleThreads"]
    meta["initialSelectedThreads"].each { |index| assert_operator index, :<, threads.size }
    assert_operator threads.count { |thread| thread["isMainThread"] }, :<=, 1

    threads.each do |thread|
      at = "#{where}: thread #{thread['name']}"
      THREAD_KEYS.each { |key| assert thread.key?(key), "#{at}: #{key}" }
      assert_kind_of String, thread["pid"], "#{at}: pid is a string since version 47"
      strings = thread["stringArray"]
      assert(strings.all?(String), at)
      COLUMNS.each do |name, columns|
        table = thread.fetch(name)
        length = table.fetch("length")
        columns.each { |column| assert_equal length, table.fetch(column).size, "#{at}: #{name}.#{column}" }
      end
      string = ->(index) { index.is_a?(Integer) && index >= 0 && index < strings.size }
      frames, funcs, stacks, samples, markers =
        thread.values_at("frameTable", "funcTable", "stackTable", "samples", "markers")

      funcs["name"].each { |index| assert string.call(index), "#{at}: func name #{index}" }
      funcs["fileName"].each { |index| assert index.nil? || string.call(index), "#{at}: func file #{index}" }
      frames["func"].each { |index| assert_includes 0...funcs["length"], index, at }
      frames["category"].each { |index| assert_includes 0...categories.size, index, at }
      stacks["length"].times do |index|
        prefix = stacks["prefix"][index]
        assert prefix.nil? || (0...index).cover?(prefix), "#{at}: a stack's prefix comes before it"
        assert_includes 0...frames["length"], stacks["frame"][index], at
        assert_includes 0...categories.size, stacks["category"][index], at
      end
      samples["stack"].each { |index| assert_includes 0...stacks["length"], index, at }
      assert_equal samples["time"].sort, samples["time"], "#{at}: samples in time order"
      assert_equal "samples", samples["weightType"]

      markers["length"].times do |index|
        assert string.call(markers["name"][index]), "#{at}: marker name"
        assert_includes 0...categories.size, markers["category"][index], at
        start, finish, phase, data = markers.values_at("startTime", "endTime", "phase", "data").map { |column| column[index] }
        assert_operator start, :>=, 0, at
        case phase
        when 0 then assert_nil finish, "#{at}: an instant has no end"
        when 1 then assert_operator start, :<=, finish, "#{at}: an interval marker ends after it starts"
        else flunk "#{at}: marker phase #{phase}"
        end
        assert schemas.key?(data["type"]), "#{at}: marker data type #{data['type']} has a schema"
        assert_equal data["state"], strings[markers["name"][index]].split.first, at
      end
    end
  end

  def test_schema_and_round_trip
    Dir.mktmpdir("gvlscope-firefox") do |dir|
      %w[hog.gvl thrash.gvl ractor.gvl convoy.gvl gvl-tracing-1.7.0.json].each do |trace|
        profile = export(dir, trace)
        assert_valid_profile(profile, trace)
        scan = GVLScope::Model::Scan.open(File.join(TRACES, trace))
        rows = GVLScope::Analysis::ThreadStats.new(scan).rows.to_h { |row| [row.serial, row] }
        threads = profile["threads"]
        threads.each do |thread|
          markers = thread["markers"]
          sums = Hash.new(0)
          markers["length"].times do |index|
            next unless markers["phase"][index] == 1

            sums[markers["data"][index]["state"]] += markers["endTime"][index] - markers["startTime"][index]
          end
          row = rows.fetch(thread["tid"])
          %w[run wait idle gc].each do |state|
            assert_equal row.public_send(:"#{state}_ns"), (sums[state] * 1_000_000).to_i, "#{trace}: #{thread['name']}: #{state}"
          end
          samples = scan.samples.select { |sample| sample.thread == thread["tid"] }
          assert_equal samples.map(&:waiters), thread["samples"]["weight"], "#{trace}: #{thread['name']}: samples"
          assert_equal samples.map { |sample| sample.time_ns }, thread["samples"]["time"].map { |ms| (ms * 1_000_000).to_i }
        end
        assert_equal rows.values.select { |row| row.run_ns + row.wait_ns + row.idle_ns + row.gc_ns > 0 }.map(&:serial).sort,
                     threads.map { |thread| thread["tid"] }.sort, "#{trace}: a track per thread with time"
      end
    end
  end

  def test_the_hog_is_drawn_with_its_stack
    Dir.mktmpdir("gvlscope-firefox") do |dir|
      profile = export(dir, "hog.gvl")
      hog = profile["threads"].find { |thread| thread["name"].start_with?("thread 2") }
      strings = hog["stringArray"]
      stack = hog["samples"]["stack"].tally.max_by(&:last).first
      frames = []
      while stack
        func = hog["frameTable"]["func"][hog["stackTable"]["frame"][stack]]
        frames << strings[hog["funcTable"]["name"][func]]
        stack = hog["stackTable"]["prefix"][stack]
      end
      assert_equal ["Counter#spin", "block in <main>"], frames
      names = hog["markers"]["name"].map { |index| strings[index] }
      assert_includes names, "run"
      assert_includes names, "wait"
      released = hog["markers"]["data"].filter_map { |data| data["released_by"] }
      assert_includes released, "preempted"
      main = profile["threads"].find { |thread| thread["isMainThread"] }
      assert_equal "main", main["name"]
      assert_includes main["markers"]["data"].map { |data| data["reason"] }, "join"
    end
  end

  # The marker columns are streamed from the engine's copy of the intervals: a trace 10x longer
  # makes a file 10x bigger, not more Ruby objects nor more engine memory.
  def test_memory_does_not_grow_with_the_events
    Dir.mktmpdir("gvlscope-firefox") do |dir|
      measured = [200_000, 2_000_000].map do |events|
        path = File.join(dir, "synthetic-#{events}.gvl")
        SyntheticTrace.write(path, events: events)
        scan = GVLScope::Model::Scan.new(GVLScope::Model::Scan.read(path), spill: true, analyse: false).run
        out = File.join(dir, "out.json")
        objects = GC.stat(:total_allocated_objects)
        File.open(out, "wb") { |io| GVLScope::Formats::Firefox.new(scan).write(io) }
        [GC.stat(:total_allocated_objects) - objects, scan.peak_bytes, File.size(out)]
      end
      (small_objects, small_bytes, small_size), (large_objects, large_bytes, large_size) = measured
      assert_operator large_size, :>=, 8 * small_size
      assert_operator large_objects, :<=, small_objects * 1.5 + 5_000, "Ruby objects: #{measured.inspect}"
      assert_operator large_bytes, :<=, small_bytes + 256 * 1024, "engine bytes: #{measured.inspect}"
    end
  end
end
