// The probe: the smallest useful hook. It counts each GVL event kind with relaxed atomics, which
// is all a smoke test needs to prove the hook is wired, and is safe from any native thread.
#include "gvlscope.h"
#include <stdatomic.h>
#include <stdbool.h>

enum { PROBE_STARTED, PROBE_READY, PROBE_RESUMED, PROBE_SUSPENDED, PROBE_EXITED, PROBE_KINDS };

static _Atomic unsigned long probe_counts[PROBE_KINDS];
static rb_internal_thread_event_hook_t *probe_hook;

static void probe_event(rb_event_flag_t event, const rb_internal_thread_event_data_t *data, void *user_data) {
    int kind;
    switch (event) {
      case RUBY_INTERNAL_THREAD_EVENT_STARTED:   kind = PROBE_STARTED; break;
      case RUBY_INTERNAL_THREAD_EVENT_READY:     kind = PROBE_READY; break;
      case RUBY_INTERNAL_THREAD_EVENT_RESUMED:   kind = PROBE_RESUMED; break;
      case RUBY_INTERNAL_THREAD_EVENT_SUSPENDED: kind = PROBE_SUSPENDED; break;
      case RUBY_INTERNAL_THREAD_EVENT_EXITED:    kind = PROBE_EXITED; break;
      default: return;
    }
    atomic_fetch_add_explicit(&probe_counts[kind], 1, memory_order_relaxed);
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
