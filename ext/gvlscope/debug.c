// Test-only entry points (GVLScope::Native.debug_*): they widen race windows and expose counts the
// tests bound. Nothing here runs unless a test calls it; the hot path pays one predictable branch
// on the rare EXITED path (hook.c), nothing elsewhere.
#include "gvlscope.h"
#include "clock.h"
#include "hook.h"
#include "metrics.h"
#include "metrics_event.h"
#include "thread_state.h"
#include "trace_session.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static _Atomic unsigned long freed_slot_writes;
static unsigned exited_delay_us;

// From the hook (gvls_hook_exited_test), on EXITED, while exited_delay_us is set.
static void exited_delay(struct gvls_thread *slot) {
    usleep(exited_delay_us);
    if (slot->serial == 0) atomic_fetch_add(&freed_slot_writes, 1);  // pruned under the hook: a use after free
}

// Native.debug_exited_delay_us = n: EXITED sleeps n µs, pruned slots are quarantined (0 turns off).
static VALUE debug_set_exited_delay(VALUE self, VALUE us) {
    exited_delay_us = NUM2UINT(us);
    if (exited_delay_us) gvls_debug_quarantine = 1;
    gvls_hook_exited_test = exited_delay_us ? exited_delay : NULL;
    return us;
}

// Native.debug_freed_slot_writes -> hooks that found their slot pruned (freed) under them
static VALUE debug_freed_slot_writes(VALUE self) {
    return ULONG2NUM(atomic_load(&freed_slot_writes));
}

// Native.debug_registry_size -> slots in the thread registry
static VALUE debug_registry_size(VALUE self) {
    return SIZET2NUM(gvls_threads_count());
}

// Native.debug_registry_threads -> slots whose Thread object the registry still marks
static VALUE debug_registry_threads(VALUE self) {
    return SIZET2NUM(gvls_threads_marked_count());
}

// Native.debug_metrics_race(iterations, preempted) -> [reads, regressions]: a native thread plays a Ruby
// thread's hook (RESUMED, SUSPENDED, READY in a loop, each state held 20-80 µs) on a private slot,
// writing exactly as hook.c does, while this thread reads the slot's counters-so-far as a snapshot
// does. A half-written slot counts a whole state (>= 20 µs) twice, and the next reading is lower.
// A consistent reading may still run ahead of an event in flight by the time between the writer's
// clock read and its first store becoming visible (measured up to 1.4 µs on a busy 2-vCPU VM: the
// CPU may read the clock before its store drains): 10 µs allowed.
// With preempted true, every release looks like a timeslice switch (another thread of the Ractor
// waits, the hold is past half of a 40 µs timeslice, READY follows on the same native thread):
// READY then moves the 20-80 µs since SUSPENDED from idle to wait, which a reading during that
// time must not have counted as idle already.
typedef struct { gvls_thread *slot; _Atomic int stop; } race_job;

static void spin_us(uint64_t us) {
    uint64_t until = gvls_now_ns() + us * 1000;
    while (gvls_now_ns() < until) {}
}

static void *race_writer(void *arg) {
    race_job *job = arg;
    static const unsigned kinds[] = { GVLS_EV_RESUMED, GVLS_EV_SUSPENDED, GVLS_EV_READY };
    for (unsigned i = 0; !atomic_load_explicit(&job->stop, memory_order_relaxed); i++) {
        uint32_t seq = gvls_metrics_write_begin(job->slot);
        gvls_metrics_event(kinds[i % 3], job->slot, gvls_now_ns());
        gvls_metrics_write_end(job->slot, seq);
        spin_us(20 + 20 * (i % 4));
    }
    return NULL;
}

static VALUE debug_metrics_race(VALUE self, VALUE iterations, VALUE preempted) {
    unsigned long n = NUM2ULONG(iterations), regressions = 0;
    race_job job = { .slot = calloc(1, sizeof(gvls_thread)) };
    if (!job.slot) rb_raise(rb_eNoMemError, "debug_metrics_race");
    job.slot->ractor_id = GVLS_MAX_RACTORS - 2;  // a Ractor counter slot no real Ractor uses here
    gvls_ractor_counters *ractor = &gvls_metrics.ractors[GVLS_MAX_RACTORS - 2];
    uint64_t timeslice_ns = gvls_metrics.timeslice_ns;
    if (RTEST(preempted)) {
        gvls_metrics.timeslice_ns = 40000;
        atomic_fetch_add(&ractor->readied, 1);  // a thread that waits for the GVL all along
    }
    pthread_t writer;
    if (pthread_create(&writer, NULL, race_writer, &job)) { free(job.slot); rb_raise(rb_eRuntimeError, "pthread_create"); }
    uint64_t last[4] = { 0 };
    for (unsigned long i = 0; i < n; i++) {
        uint64_t now[GVLS_COUNTERS_NOW];
        gvls_metrics_counters_now(job.slot, gvls_now_ns(), now, NULL);
        for (int c = 0; c < 4; c++) {
            if (now[c] + 10000 < last[c]) regressions++;
            last[c] = now[c];
        }
    }
    atomic_store(&job.stop, 1);
    pthread_join(writer, NULL);
    if (RTEST(preempted)) {
        atomic_fetch_sub(&ractor->readied, 1);
        gvls_metrics.timeslice_ns = timeslice_ns;
    }
    free(job.slot);
    return rb_ary_new_from_args(2, ULONG2NUM(n), ULONG2NUM(regressions));
}

// Native.debug_metrics_replay(events, read_at_ms) -> [run_ns, wait_ns, idle_ns, gc_ns, io_overlap_wait_ns]: a private slot
// sees +events+ ([[kind, ms], ...], kind one of :ready, :resumed, :suspended, :exited, :gc_enter,
// :gc_exit, ms after the replay's start) exactly as the hook hands them to the metrics, and is
// read read_at_ms after the start as a snapshot reads it (the state in progress included): the
// metrics' arithmetic on exact event sequences.
static unsigned replay_kind(VALUE name) {
    static const char *names[] = { "ready", "resumed", "suspended", "exited", "gc_enter", "gc_exit" };
    static const unsigned kinds[] = { GVLS_EV_READY, GVLS_EV_RESUMED, GVLS_EV_SUSPENDED, GVLS_EV_EXITED,
                                      GVLS_EV_GC_ENTER, GVLS_EV_GC_EXIT };
    if (SYMBOL_P(name)) {
        const char *given = rb_id2name(SYM2ID(name));
        for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
            if (strcmp(given, names[i]) == 0) return kinds[i];
    }
    rb_raise(rb_eArgError, "not an event kind: %"PRIsVALUE, rb_inspect(name));
}

typedef struct { gvls_thread *slot; uint64_t start_ns, kept[4]; } replay;

// A private slot that saw +events+ as the hook hands them to the metrics (put back with replay_end).
static replay replay_begin(VALUE events) {
    Check_Type(events, T_ARRAY);
    long n = RARRAY_LEN(events);
    unsigned kinds[64];
    double at_ms[64];
    if (n > 64) rb_raise(rb_eArgError, "at most 64 events");
    for (long i = 0; i < n; i++) {
        VALUE event = rb_ary_entry(events, i);
        Check_Type(event, T_ARRAY);
        kinds[i] = replay_kind(rb_ary_entry(event, 0));
        at_ms[i] = NUM2DBL(rb_ary_entry(event, 1));
    }
    replay r = { .slot = calloc(1, sizeof(gvls_thread)) };
    if (!r.slot) rb_raise(rb_eNoMemError, "debug_metrics_replay");
    r.slot->ractor_id = GVLS_MAX_RACTORS - 2;  // a Ractor counter slot no real Ractor uses here
    gvls_ractor_counters *ractor = &gvls_metrics.ractors[GVLS_MAX_RACTORS - 2];
    r.kept[0] = atomic_load(&ractor->readied); r.kept[1] = atomic_load(&ractor->acquired);
    r.kept[2] = atomic_load(&ractor->abandoned); r.kept[3] = atomic_load(&ractor->resume_seq);
    r.start_ns = gvls_now_ns();       // after the epoch: the metrics count from there
    for (long i = 0; i < n; i++) {
        uint32_t seq = gvls_metrics_write_begin(r.slot);
        gvls_metrics_event(kinds[i], r.slot, r.start_ns + (uint64_t)(at_ms[i] * 1e6));
        gvls_metrics_write_end(r.slot, seq);
    }
    return r;
}

static void replay_end(replay *r) {
    free(r->slot);
    // A replay that ends waiting would leave a waiter behind for the race tests: put them back.
    gvls_ractor_counters *ractor = &gvls_metrics.ractors[GVLS_MAX_RACTORS - 2];
    atomic_store(&ractor->readied, r->kept[0]); atomic_store(&ractor->acquired, r->kept[1]);
    atomic_store(&ractor->abandoned, r->kept[2]); atomic_store(&ractor->resume_seq, r->kept[3]);
}

static uint64_t replay_ns(const replay *r, VALUE ms) { return r->start_ns + (uint64_t)(NUM2DBL(ms) * 1e6); }

static VALUE debug_metrics_replay(VALUE self, VALUE events, VALUE read_at_ms) {
    replay r = replay_begin(events);
    uint64_t out[GVLS_COUNTERS_NOW];
    gvls_metrics_counters_now(r.slot, replay_ns(&r, read_at_ms), out, NULL);
    uint64_t overlap_ns = r.slot->metrics.io_overlap_wait_ns;
    replay_end(&r);
    return rb_ary_new_from_args(5, ULL2NUM(out[GVLS_NOW_RUN]), ULL2NUM(out[GVLS_NOW_WAIT]), ULL2NUM(out[GVLS_NOW_IDLE]),
                                ULL2NUM(out[GVLS_NOW_GC]), ULL2NUM(overlap_ns));
}

// Native.debug_wait_since(events, from_ms, read_at_ms) -> [wait_ns, exact]: as debug_metrics_replay,
// then the slot's GVL wait between from_ms and read_at_ms from its wait log (handoff.c's window).
static VALUE debug_wait_since(VALUE self, VALUE events, VALUE from_ms, VALUE read_at_ms) {
    replay r = replay_begin(events);
    int exact;
    uint64_t wait = gvls_metrics_wait_since(r.slot, replay_ns(&r, from_ms), replay_ns(&r, read_at_ms), &exact, NULL);
    replay_end(&r);
    return rb_ary_new_from_args(2, ULL2NUM(wait), exact ? Qtrue : Qfalse);
}

// Native.debug_nogvl_delay_us = n: stop's and a dump's waits without the GVL last n µs more.
static VALUE debug_set_nogvl_delay(VALUE self, VALUE us) {
    gvls_session_test_nogvl_delay_us = NUM2UINT(us);
    return us;
}

void gvls_debug_init(VALUE mNative) {
    rb_define_singleton_method(mNative, "debug_nogvl_delay_us=", debug_set_nogvl_delay, 1);
    rb_define_singleton_method(mNative, "debug_exited_delay_us=", debug_set_exited_delay, 1);
    rb_define_singleton_method(mNative, "debug_freed_slot_writes", debug_freed_slot_writes, 0);
    rb_define_singleton_method(mNative, "debug_registry_size", debug_registry_size, 0);
    rb_define_singleton_method(mNative, "debug_registry_threads", debug_registry_threads, 0);
    rb_define_singleton_method(mNative, "debug_metrics_race", debug_metrics_race, 2);
    rb_define_singleton_method(mNative, "debug_metrics_replay", debug_metrics_replay, 2);
    rb_define_singleton_method(mNative, "debug_wait_since", debug_wait_since, 3);
}
