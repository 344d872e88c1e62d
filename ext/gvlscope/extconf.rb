# frozen_string_literal: true

require "mkmf"

# The GVL instrumentation API with STARTED/EXITED, event_data->thread and thread-specific storage
# exists from CRuby 3.3. Refuse plainly instead of failing with a compiler error dump.
if RUBY_ENGINE != "ruby" || Gem::Version.new(RUBY_VERSION) < Gem::Version.new("3.3")
  abort "gvlscope needs CRuby >= 3.3 (GVL instrumentation API); this is #{RUBY_ENGINE} #{RUBY_VERSION}"
end

%w[rb_internal_thread_add_event_hook rb_internal_thread_specific_key_create].each do |func|
  have_func(func, "ruby/thread.h") or abort "gvlscope: #{func} is missing from ruby/thread.h"
end

# CRuby's struct layouts are read (a thread's Ractor id) only for the versions cruby_layout.h lists,
# each checked against that version's headers (script/check-ruby-headers). A newer Ruby builds and
# records all the same, with every thread in "Ractor 0". GVLSCOPE_LAYOUT_FOR_API=MAJOR*100+MINOR
# builds as if for another version (test/gem/rubies_test.rb: a Ruby newer than the table). Tests only.
if (layout_api = ENV["GVLSCOPE_LAYOUT_FOR_API"])
  $defs << "-DGVLS_LAYOUT_FOR_API=#{Integer(layout_api)}"
end
unless try_compile(%(#include "cruby_layout.h"\n#if !GVLS_CRUBY_LAYOUT_KNOWN\n#error unknown\n#endif\n), "-I#{__dir__} #{$defs.join(' ')}")
  message "gvlscope: CRuby #{RUBY_VERSION} is newer than the CRuby internals gvlscope has checked (ext/gvlscope/cruby_layout.h): " \
          "it records all the same, with every thread's Ractor id 0 (all threads as one Ractor)\n"
end

$CFLAGS << " -std=gnu11 -O2 -Wall -Wextra -Wno-unused-parameter -fvisibility=hidden"
# script/sanitize: GVLSCOPE_SANITIZE=1 builds the extension with AddressSanitizer and UBSan (the
# Ruby stays uninstrumented; libasan is preloaded into it). Never for an installed gem.
if ENV["GVLSCOPE_SANITIZE"] == "1"
  $CFLAGS << " -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined"
  $LDFLAGS << " -fsanitize=address,undefined"
end
create_makefile("gvlscope/gvlscope")
