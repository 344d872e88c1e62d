# frozen_string_literal: true

# Each test's wall time, written to the file GVLSCOPE_TEST_TIMES names when the run ends: script/test
# lists the slowest in its summary, so a CI log says where the suite's time goes. The variable is
# taken out of ENV, so that a child Ruby running tests of its own does not write the file too.
module TestTimes
  def self.install(path)
    times = []
    Minitest::Test.prepend(Module.new do
      define_method(:run) do
        result = super()
        times << format("%8.1f s  %s#%s", result.time, result.klass, result.name)
        result
      end
    end)
    Minitest.after_run { File.write(path, times.join("\n") << "\n") }
  end
end

TestTimes.install(ENV.delete("GVLSCOPE_TEST_TIMES")) if ENV["GVLSCOPE_TEST_TIMES"]
