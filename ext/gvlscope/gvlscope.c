// Init_gvlscope: sets up the recorder's process-wide state and defines the Ruby-visible functions;
// and the one after-fork reset, which calls each module's in order.
#include "gvlscope.h"
#include "clock.h"
#include "hook.h"
#include "metrics.h"
#include "thread_state.h"
#include "trace_session.h"

// Native.after_fork_in_child -> whether a trace was recording. The child inherits the parent's
// state but none of its other threads: the registry first (its lock may have been held), then the
// trace (its sink through the session), the metrics, and last the hook, which follows them.
static VALUE after_fork_in_child(VALUE self) {
    gvls_thread_state_after_fork();
    int was_tracing = gvls_session_after_fork();
    gvls_metrics_after_fork();
    gvls_hook_sync();
    return was_tracing ? Qtrue : Qfalse;
}

RUBY_FUNC_EXPORTED void Init_gvlscope(void) {
    VALUE mGVLScope = rb_define_module("GVLScope");
    VALUE mNative = rb_define_module_under(mGVLScope, "Native");
    gvls_clock_init();
    gvls_thread_state_init();
    gvls_hook_init();
    gvlscope_probe_init(mNative);
    gvls_trace_session_init(mNative);
    gvls_sink_file_init(mNative);
    gvls_sink_ring_init(mNative);
    gvls_metrics_init(mNative);
    gvls_request_timing_init(mGVLScope);
    gvls_debug_init(mNative);
    rb_define_singleton_method(mNative, "after_fork_in_child", after_fork_in_child, 0);
    rb_define_const(mNative, "CLOCK_SOURCE", rb_str_new_cstr(gvls_clock_source()));
}
