# frozen_string_literal: true

require "mkmf"

# The report engine (reading traces), separate from the recorder (ext/gvlscope): plain C and
# POSIX file calls, no GVL instrumentation API.
$CFLAGS << " -std=gnu11 -O2 -Wall -Wextra -Wno-unused-parameter -fvisibility=hidden"
# script/sanitize: GVLSCOPE_SANITIZE=1 builds it with AddressSanitizer and UBSan, as the recorder.
if ENV["GVLSCOPE_SANITIZE"] == "1"
  $CFLAGS << " -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined"
  $LDFLAGS << " -fsanitize=address,undefined"
end
create_makefile("gvlscope/gvlscope_engine")
