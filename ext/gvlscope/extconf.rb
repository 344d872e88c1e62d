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

$CFLAGS << " -std=gnu11 -O2 -Wall -Wextra -Wno-unused-parameter -fvisibility=hidden"
# script/sanitize: GVLSCOPE_SANITIZE=1 builds the extension with AddressSanitizer and UBSan (the
# Ruby stays uninstrumented; libasan is preloaded into it). Never for an installed gem.
if ENV["GVLSCOPE_SANITIZE"] == "1"
  $CFLAGS << " -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined"
  $LDFLAGS << " -fsanitize=address,undefined"
end
create_makefile("gvlscope/gvlscope")
