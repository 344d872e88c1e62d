// Init_gvlscope: sets up the recorder's process-wide state and defines the Ruby-visible functions;
// and the one after-fork reset, which calls each module's in order.
#include "gvlscope.h"
#include "clock.h"
#include "hook.h"
#include "metrics.h"
#include "thread_state.h"
#include "trace_session.h"
#include "stacks.h"
#include <pthread.h>

// In every forked child, however it forked: Process._fork, but also daemon(3) (Process.daemon), a
// C extension's fork(2) or a spawn through fork. The child has only the forking thread: locks other
// threads held stay held, and the trace's drain thread is gone, so stopping the trace would join
// it forever. C only, no Ruby (this runs inside fork): the registry first (its lock), then the
// trace (its sink through the session). Metrics and the hook, which need Ruby, follow in
// after_fork_in_child when the fork went through Process._fork.
static int fork_was_tracing;

static void atfork_child(void) {
    gvls_thread_state_after_fork();
    if (gvls_session_after_fork()) fork_was_tracing = 1;
    gvls_handoff_after_fork();
}

// Native.after_fork_in_child -> whether a trace was recording when the process forked.
static VALUE after_fork_in_child(VALUE self) {
    int was_tracing = fork_was_tracing;
    fork_was_tracing = 0;
    gvls_stacks_pause();  // the sampler's tracepoint (a Ruby call: not in the atfork handler)
    gvls_metrics_after_fork();
    gvls_hook_sync();
    return was_tracing ? Qtrue : Qfalse;
}

RUBY_FUNC_EXPORTED void Init_gvlscope(void) {
    VALUE mGVLScope = rb_define_module("GVLScope");
    VALUE mNative = rb_define_module_under(mGVLScope, "Native");
    gvls_clock_init();
    gvls_thread_state_init();
    gvls_thread_state_define(mNative);
    gvls_hook_init();
    gvls_stacks_init();
    gvlscope_probe_init(mNative);
    gvls_trace_session_init(mNative);
    gvls_sink_file_init(mNative);
    gvls_sink_ring_init(mNative);
    gvls_metrics_init(mNative);
    gvls_request_timing_init(mGVLScope);
    gvls_breakdown_init(mNative);
    gvls_handoff_init(mNative);
    gvls_debug_init(mNative);
    rb_define_singleton_method(mNative, "after_fork_in_child", after_fork_in_child, 0);
    pthread_atfork(NULL, NULL, atfork_child);
    rb_define_const(mNative, "CLOCK_SOURCE", rb_str_new_cstr(gvls_clock_source()));
}
