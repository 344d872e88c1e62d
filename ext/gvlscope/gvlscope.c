// Init_gvlscope: sets up the recorder's process-wide state and defines the Ruby-visible functions.
#include "gvlscope.h"
#include "clock.h"
#include "hook.h"
#include "metrics.h"
#include "thread_state.h"

RUBY_FUNC_EXPORTED void Init_gvlscope(void) {
    VALUE mGVLScope = rb_define_module("GVLScope");
    VALUE mNative = rb_define_module_under(mGVLScope, "Native");
    gvls_clock_init();
    gvls_thread_state_init();
    gvls_hook_init();
    gvlscope_probe_init(mNative);
    gvls_trace_session_init(mNative);
    gvls_metrics_init(mNative);
    gvls_request_timing_init(mGVLScope);
    rb_define_const(mNative, "CLOCK_SOURCE", rb_str_new_cstr(gvls_clock_source()));
}
