// The single GVL event hook and the GC tracepoint. Runs outside the GVL (READY, EXITED) or just
// before/after the GVL changes hands, possibly on several native threads at once: it reads the
// clock, finds the thread's slot and hands the event to the consumers. No Ruby calls, no Ruby
// allocation, no locks but on the rare slow paths (first sight of a thread, a full chunk).
#include "hook.h"
#include "clock.h"
#include "thread_state.h"
#include "trace.h"
#include "metrics_event.h"
#include "stacks.h"

static rb_internal_thread_event_hook_t *thread_hook;
void (*gvls_hook_exited_test)(struct gvls_thread *slot);  // debug.c: widens the EXITED window in tests; NULL otherwise

// EXITED, on the thread's own native thread: its lane's chunk goes back to the pool. And the last
// the hook does with an exited thread's slot. Once a snapshot sees `exited` it may free the
// slot (thread_state.c, prune), so the flag is published after every write, with release order
// (gvls_thread_exited, which also queues the slot for its Thread to be let go of).
static __attribute__((noinline)) void gvls_hook_exited(gvls_thread *slot) {
    if (atomic_load_explicit(&gvls_current_trace.active, memory_order_acquire)) gvls_trace_release_lane();
    if (__builtin_expect(gvls_hook_exited_test != NULL, 0)) gvls_hook_exited_test(slot);
    gvls_thread_exited(slot);
}
static VALUE gc_tracepoint = Qnil;

static inline void dispatch(unsigned kind, gvls_thread *slot, uint64_t now_ns) {
    if (atomic_load_explicit(&gvls_metrics.enabled, memory_order_relaxed)) gvls_metrics_event(kind, slot, now_ns);
    // Acquire: pairs with the start's store, so the lane generation read next is the new one (trace.h).
    if (atomic_load_explicit(&gvls_current_trace.active, memory_order_acquire)) {
        gvls_trace_record(kind, slot->serial, now_ns);
        if (atomic_load_explicit(&gvls_stacks.on, memory_order_relaxed)) gvls_stacks_event(kind, slot, now_ns);
    }
}

static void on_thread_event(rb_event_flag_t event, const rb_internal_thread_event_data_t *data, void *unused) {
    unsigned kind = gvls_kind_of(event);
    if (!kind) return;
    // Always the subject thread: the native thread running this hook may be another one.
    gvls_thread *slot = gvls_thread_for(data->thread);
    if (!slot) return;
    // The clock is read inside the write bracket: a snapshot that copies the slot before it has
    // read its own clock before this event's, so it cannot count more than the event will.
    uint32_t seq = gvls_metrics_write_begin(slot);
    uint64_t now_ns = gvls_now_ns();
    dispatch(kind, slot, now_ns);
    gvls_metrics_write_end(slot, seq);
    if (__builtin_expect(kind == GVLS_EV_EXITED, 0)) gvls_hook_exited(slot);
}

// GC runs with the GVL held, on the thread that triggered it. Up to 3.4 the tracepoint fires only
// for GCs the main Ractor's threads trigger (hooks per Ractor); from 4.0 GC events are VM-wide and
// it fires on whatever Ractor's thread ran the GC. Either way one tracepoint, enabled once: each
// GC step is counted once, on the thread that ran it.
static void on_gc_event(VALUE tracepoint, void *unused) {
    rb_event_flag_t flag = rb_tracearg_event_flag(rb_tracearg_from_tracepoint(tracepoint));
    gvls_threads_release_poke();  // exited threads not yet released: released after this GC, collected by the next
    VALUE thread = rb_thread_current();
    // 4.1-dev: a dying thread's last GC can sweep its own Thread (self 0): nothing to look up.
    if (__builtin_expect(!RTEST(thread), 0)) return;
    gvls_thread *slot = gvls_thread_for(thread);
    if (!slot) return;
    uint32_t seq = gvls_metrics_write_begin(slot);
    uint64_t now_ns = gvls_now_ns();
    dispatch(flag == RUBY_INTERNAL_EVENT_GC_ENTER ? GVLS_EV_GC_ENTER : GVLS_EV_GC_EXIT, slot, now_ns);
    gvls_metrics_write_end(slot, seq);
}

void gvls_hook_init(void) {
    gc_tracepoint = rb_tracepoint_new(0, RUBY_INTERNAL_EVENT_GC_ENTER | RUBY_INTERNAL_EVENT_GC_EXIT, on_gc_event, NULL);
    rb_gc_register_address(&gc_tracepoint);
}

void gvls_hook_install(void) {
    if (thread_hook) return;
    gvls_threads_hook_on(1);  // before any callback can run
    thread_hook = rb_internal_thread_add_event_hook(on_thread_event, RUBY_INTERNAL_THREAD_EVENT_MASK, NULL);
    rb_tracepoint_enable(gc_tracepoint);
}

void gvls_hook_remove(void) {
    if (!thread_hook) return;  // removing twice would crash CRuby
    rb_tracepoint_disable(gc_tracepoint);
    rb_internal_thread_remove_event_hook(thread_hook);
    thread_hook = NULL;
    gvls_threads_hook_on(0);  // after: removal waited for the callbacks in flight
}

void gvls_hook_sync(void) {
    if (atomic_load(&gvls_current_trace.active) || atomic_load(&gvls_metrics.enabled)) gvls_hook_install();
    else gvls_hook_remove();
}
