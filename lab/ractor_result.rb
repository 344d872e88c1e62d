# frozen_string_literal: true

# A finished Ractor's block value on any Ruby: Ruby 4.0 removed Ractor#take (with Ractor.yield)
# and added Ractor#value, so whichever exists is used (feature detection, not a version check).
# Shared by the lab's scenarios and the tests' child programs.
module RactorResult
  module_function

  def of(ractor) = ractor.respond_to?(:value) ? ractor.value : ractor.take
end
