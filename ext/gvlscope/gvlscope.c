// Init_gvlscope: sets up the recorder's process-wide state and defines the Ruby-visible functions;
// and the one after-fork reset, which calls each module's in order.
#include "gvlscope.h"
#include "handoff.h"
#include "fibers.h"
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

// The hook, the thread-specific key (one of CRuby's 8 per process) and the atfork handler are
// process-wide: set up once. A second Init in one process comes from a second copy of this
// library, with statics of its own: with RUBY_BOX=1 (Ruby 4.0) every Ruby::Box loads its own copy.
// So the mark is kept where every copy sees it: an instance variable of the main Ractor's main
// Thread whose name has no "@" (Ruby code cannot see it). The second copy refuses to load.
static int initialized;  // this copy's Init has run (a repeated call reuses everything)

static int process_already_has_gvlscope(void) {
    ID loaded = rb_intern("__gvlscope_loaded__");
    VALUE main_thread = rb_thread_main();
    if (RTEST(rb_attr_get(main_thread, loaded))) return 1;
    rb_ivar_set(main_thread, loaded, Qtrue);
    return 0;
}

RUBY_FUNC_EXPORTED void Init_gvlscope(void) {
    if (initialized) return;
    VALUE mGVLScope = rb_define_module("GVLScope");
    if (process_already_has_gvlscope()) {
        VALUE error = rb_const_defined(mGVLScope, rb_intern("Error")) ? rb_const_get(mGVLScope, rb_intern("Error")) : rb_eLoadError;
        rb_raise(error, "gvlscope is loaded already in this process (by another Ruby::Box, or another copy of "
                        "its library): its GVL hook is process-wide, so it loads once; require it in the main box only");
    }
    initialized = 1;
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
    // The metrics switch the hook through this: they are below it (it runs their event code).
    gvls_metrics_on_switch(gvls_hook_sync);
    gvls_request_timing_init(mGVLScope);
    gvls_breakdown_init(mNative);
    gvls_live_answer_init(mNative);
    gvls_handoff_init(mNative);
    gvls_fibers_init(mNative);
    gvls_request_timing_loop_init();
    gvls_debug_init(mNative);
    rb_define_singleton_method(mNative, "after_fork_in_child", after_fork_in_child, 0);
    pthread_atfork(NULL, NULL, atfork_child);
    rb_define_const(mNative, "CLOCK_SOURCE", rb_str_new_cstr(gvls_clock_source()));
    // false on a Ruby whose layout cruby_layout.h does not know: every thread is in "Ractor 0".
    rb_define_const(mNative, "RACTOR_IDS", gvls_ractor_ids_known() ? Qtrue : Qfalse);
}
