# frozen_string_literal: true

require "test_helper"
require "open3"
require "tmpdir"
require "zlib"

# `gvlscope export --format pprof`: a gzipped profile.proto, read by a real consumer (`go tool
# pprof`, Debian's golang-go; script/test installs it) whose numbers must be the engine's: the
# holders' stacks with their samples, waiting threads and the blamed wait in ns, the release
# sites with their releases and the wait that followed.
# Run alone: bundle exec ruby -Ilib -Itest test/formats/pprof_test.rb
class PprofTest < Minitest::Test
  include GVLScopeTestHelper

  TRACES = File.join(ROOT, "test/fixtures/traces")

  # What `go tool pprof -raw` prints of a profile: the sample types, the samples (values, location
  # ids leaf first, labels) and the locations (function, file, line).
  Raw = Struct.new(:types, :samples, :locations) do
    def stack(sample) = sample[:locations].map { |id| locations.fetch(id) }

    # name => the values of the samples whose labels include +labels+, summed.
    def total(type, **labels)
      index = types.index(type)
      samples.select { |sample| labels.all? { |key, value| sample[:labels][key.to_s] == value } }.sum { |sample| sample[:values][index] }
    end
  end

  def go_pprof(*args)
    skip "go is not installed (apt-get install golang-go): `go tool pprof` reads the pprof export here" unless go?
    out, err, status = Open3.capture3("go", "tool", "pprof", *args)
    assert status.success?, "go tool pprof #{args.join(' ')}: #{err}"
    out
  end

  def go? = system("go version", out: File::NULL, err: File::NULL)

  def raw(path)
    text = go_pprof("-raw", path)
    types = text[/^Samples:\n(.*)$/, 1].split.map { |type| type.sub(%r{/.*}, "") }
    samples = []
    locations = {}
    section = nil
    text.each_line(chomp: true) do |line|
      section = line.delete_suffix(":") if line.match?(/\A[A-Z][a-z]+s:?\z/)
      case section
      when "Samples"
        if (match = line.match(/\A\s+([\d ]+):([\d ]*)\s*\z/))
          samples << { values: match[1].split.map { |v| Integer(v) }, locations: match[2].split.map { |v| Integer(v) }, labels: {} }
        elsif samples.any? && line.match?(/\A\s+\w+:\[/)
          line.scan(/(\w+):\[([^\]]*)\]/) { |key, value| samples.last[:labels][key] = value }
        end
      when "Locations"
        match = line.match(/\A\s*(\d+): 0x\h+ M=\d+ (.*) (\S*):(\d+) s=\d+/)
        locations[Integer(match[1])] = [match[2], match[3], Integer(match[4])] if match
      end
    end
    Raw.new(types, samples, locations)
  end

  def export(dir, trace)
    out = File.join(dir, "#{File.basename(trace, '.gvl')}.pb.gz")
    _stdout, err, status = gvlscope("export", File.join(TRACES, trace), "--format", "pprof", "-o", out)
    assert status.success?, err
    out
  end

  def scan(trace) = GVLScope::Model::Scan.open(File.join(TRACES, trace))

  def test_the_holders_and_release_sites_of_hog_are_the_engines
    Dir.mktmpdir("gvlscope-pprof") do |dir|
      path = export(dir, "hog.gvl")
      assert_equal "\x1f\x8b".b, File.binread(path, 2), "gzipped"
      profile = raw(path)
      assert_equal %w[holder_samples waiting_threads gvl_wait releases wait_after_release], profile.types
      scan = scan("hog.gvl")
      labels = scan.threads.transform_values(&:label)

      # The holders: every sample of a (thread, stack) once, as the engine's samples sum them.
      expected = Hash.new { |hash, key| hash[key] = [0, 0] }
      scan.samples.each do |sample|
        key = [labels[sample.thread], sample.stack.map { |f| [f.label, f.path.to_s, f.line] }]
        expected[key][0] += 1
        expected[key][1] += sample.waiters
      end
      holders = profile.samples.select { |sample| sample[:values][0].positive? }
      assert_equal expected, holders.to_h { |sample| [[sample[:labels]["thread"], profile.stack(sample)], sample[:values][0, 2]] }
      top = holders.max_by { |sample| sample[:values][2] }
      assert_equal [["Counter#spin", "hog.rb", 8], ["block in <main>", "hog.rb", 15]], profile.stack(top)

      # gvl_wait: the blame of each holder (nil: the hand-off), all of it.
      blamed = Hash.new(0)
      scan.blame_rows.each { |row| blamed[row.holder && labels[row.holder]] += row.all_ns.to_i }
      blamed.each do |label, ns|
        shown = label ? profile.total("gvl_wait", thread: label) : profile.total("gvl_wait") - blamed.except(nil).values.sum
        assert_equal ns, shown, "gvl_wait of #{label || 'the hand-off'}"
      end
      assert_operator top[:values][2], :>, 0.9 * profile.total("gvl_wait")

      # Release sites: releases and the wait after, per thread and cause, as the engine summed them.
      sites = Hash.new { |hash, key| hash[key] = [0, 0] }
      scan.release_site_rows.each do |row|
        key = [labels[row.thread], GVLScope::Model::Scan::REASONS[row.reason].to_s, scan.file.stack(row.site_id).first.label]
        sites[key][0] += row.releases
        sites[key][1] += row.waited_ns
      end
      shown = Hash.new { |hash, key| hash[key] = [0, 0] }
      profile.samples.select { |sample| sample[:labels]["cause"] }.each do |sample|
        key = [sample[:labels]["thread"], sample[:labels]["cause"], profile.stack(sample).first.first]
        shown[key][0] += sample[:values][3]
        shown[key][1] += sample[:values][4]
      end
      refute_empty sites
      assert_equal sites, shown

      # -top, the view people start with: Counter#spin made the others wait.
      top_text = go_pprof("-top", path)
      assert_match(/Type: gvl_wait/, top_text)
      assert_match(/^\s*\S+ +9\d\.\d+% +\S+ +\S+ +\S+ +Counter#spin$/, top_text)
      releases = go_pprof("-top", "-sample_index=releases", path)
      assert_match(/^\s*10 +50\.00% +50\.00% +10 +50\.00% +Counter#spin$/, releases)
    end
  end

  def test_thrash_sums_to_every_wait
    Dir.mktmpdir("gvlscope-pprof") do |dir|
      profile = raw(export(dir, "thrash.gvl"))
      scan = scan("thrash.gvl")
      assert_equal scan.blame_rows.sum { |row| row.all_ns.to_i }, profile.total("gvl_wait")
      assert_equal scan.samples.sum(&:waiters), profile.total("waiting_threads")
      assert_equal scan.release_site_rows.sum(&:releases), profile.total("releases")
      assert_equal scan.release_site_rows.sum(&:waited_ns), profile.total("wait_after_release")
    end
  end

  def test_a_trace_without_stacks_is_a_one_line_error
    Dir.mktmpdir("gvlscope-pprof") do |dir|
      trace = File.join(dir, "convoy.gvl")
      FileUtils.cp(File.join(TRACES, "convoy.gvl"), trace) # a version 1 trace
      out, err, status = gvlscope("export", trace, "--format", "pprof")
      assert_equal 1, status.exitstatus
      assert_empty out
      assert_equal "gvlscope: #{trace}: no stacks recorded (traced with --no-stacks, or not a gvlscope v2 trace)\n", err
      refute File.exist?(File.join(dir, "convoy.pb.gz")), "an empty output file was left behind"
    end
  end

  def test_the_same_bytes_every_time
    bytes = 2.times.map { GVLScope::Formats::Pprof.new(scan("hog.gvl")).to_s }
    assert_equal bytes.first, bytes.last
    assert_equal Zlib.gunzip(bytes.first).b, GVLScope::Formats::Pprof.new(scan("hog.gvl")).profile
  end
end
