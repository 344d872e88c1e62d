// The probe: the smallest useful hook. It counts each GVL event kind with relaxed atomics, which
// is all a smoke test needs to prove the hook is wired, and is safe from any native thread.
#include "gvlscope.h"
#include "hook.h"
#include <stdatomic.h>
#include <stdbool.h>

enum { PROBE_KINDS = GVLS_EV_EXITED };  // counts of GVLS_EV_STARTED..GVLS_EV_EXITED

static _Atomic unsigned long probe_counts[PROBE_KINDS];
static rb_internal_thread_event_hook_t *probe_hook;

static void probe_event(rb_event_flag_t event, const rb_internal_thread_event_data_t *data, void *user_data) {
    unsigned kind = gvls_kind_of(event);  // 1..5 in the order of probe_counts
    if (!kind) return;
    atomic_fetch_add_explicit(&probe_counts[kind - 1], 1, memory_order_relaxed);
}

static VALUE probe_start(VALUE self) {
    if (probe_hook) rb_raise(rb_eRuntimeError, "the GVL probe is already running");
    for (int i = 0; i < PROBE_KINDS; i++) atomic_store(&probe_counts[i], 0);
    probe_hook = rb_internal_thread_add_event_hook(probe_event, RUBY_INTERNAL_THREAD_EVENT_MASK, NULL);
    return Qnil;
}

// Returns [started, ready, resumed, suspended, exited]. Removing the hook waits for callbacks in
// flight, so the counts read afterwards are final.
static VALUE probe_stop(VALUE self) {
    if (!probe_hook) rb_raise(rb_eRuntimeError, "the GVL probe is not running");
    rb_internal_thread_remove_event_hook(probe_hook);
    probe_hook = NULL;
    VALUE counts = rb_ary_new_capa(PROBE_KINDS);
    for (int i = 0; i < PROBE_KINDS; i++) rb_ary_push(counts, ULONG2NUM(atomic_load(&probe_counts[i])));
    return counts;
}

void gvlscope_probe_init(VALUE mNative) {
    rb_define_singleton_method(mNative, "probe_start", probe_start, 0);
    rb_define_singleton_method(mNative, "probe_stop", probe_stop, 0);
}
