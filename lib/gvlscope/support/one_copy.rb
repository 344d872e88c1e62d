# frozen_string_literal: true

# One gvlscope per process. A global `gvlscope run -- bundle exec puma` loads the copy of the
# gem that runs it (RUBYOPT's autorun), and the app may then require the copy in its bundle: two
# copies would redefine every constant and load a second native recorder. Each file a program
# requires by name asks OneCopy first; a second copy's file loads the first copy's instead, and
# the process is told once. Loaded again by a second copy, this file changes nothing.
unless defined?(GVLScope::OneCopy)
  module GVLScope
    module OneCopy
      # The lib directory of the copy loaded first.
      LIB = File.expand_path("../..", __dir__)
      @told = false

      # True when +feature+ ("gvlscope/rack") of the copy whose lib is +lib+ should not load:
      # another copy was loaded first, and its +feature+ is now loaded instead.
      def self.elsewhere?(lib, feature)
        return false if File.expand_path(lib) == LIB

        unless @told
          @told = true
          warn "gvlscope: two copies of gvlscope in this process (#{LIB} and #{File.expand_path(lib)}): " \
               "keeping #{LIB}, loaded first"
        end
        require File.join(LIB, feature)
        true
      end
    end
  end
end
