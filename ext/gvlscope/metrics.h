// Consumer 1, metrics: always-on counters and histograms updated from the hook.
#ifndef GVLSCOPE_METRICS_H
#define GVLSCOPE_METRICS_H

#include "thread_state.h"
#include <stdatomic.h>

// A thread's state, in the words of lib/gvlscope/vocabulary.rb (METRIC_STATES lists them in this
// order; Native::STATES, made from GVLS_STATE_NAMES, lets a test check that they agree).
enum gvls_state { GVLS_STATE_UNKNOWN = 0, GVLS_STATE_WAIT, GVLS_STATE_RUN, GVLS_STATE_IDLE, GVLS_STATE_EXITED };
#define GVLS_STATE_NAMES { "unknown", "wait", "run", "idle", "exited" }

#define GVLS_MAX_RACTORS 64   // Ractor ids beyond share the last slot

// A Ractor's counters, one cache line: every GVL event of the Ractor touches it.
// Threads waiting for its GVL = readied - acquired - abandoned. Three counters, not one gauge, so
// that each has one kind of writer. And no locked instruction on the hot path: CRuby fires READY,
// RESUMED and EXITED of a thread with its Ractor's scheduler lock held (thread_pthread.c, 3.3.8 and
// 3.4.5: every caller of thread_sched_to_ready_common takes thread_sched_lock; RESUMED comes at the
// end of thread_sched_wait_running_turn, "locked"; thread_sched_to_dead_common is "locked"), so
// writers of one Ractor's counters never overlap and a plain load + store adds. Only a slot that
// several Ractors share (ids past GVLS_MAX_RACTORS - 2, or 0 when the id cannot be read) needs
// locked adds: gvls_ractor_add picks.
typedef struct gvls_ractor_counters {
    _Atomic uint64_t readied;
    _Atomic uint64_t acquired;
    _Atomic uint64_t abandoned;
    _Atomic uint64_t resume_seq;  // RESUMED count (yield detection)
} __attribute__((aligned(64))) gvls_ractor_counters;

typedef struct gvls_metrics_global {
    // Read by every event: together in the first cache line.
    _Atomic int enabled;
    uint64_t epoch_ns;          // enable/reset time: nothing before it is counted
    uint64_t timeslice_ns;      // a release after >= half of this while others wait is a preemption
    gvls_ractor_counters ractors[GVLS_MAX_RACTORS];
} gvls_metrics_global;

extern gvls_metrics_global gvls_metrics;

static inline int gvls_ractor_slot_shared(unsigned slot) {
    return slot == 0 || slot == GVLS_MAX_RACTORS - 1;
}

static inline void gvls_ractor_add(_Atomic uint64_t *counter, unsigned slot) {
    if (__builtin_expect(gvls_ractor_slot_shared(slot), 0)) atomic_fetch_add_explicit(counter, 1, memory_order_relaxed);
    else atomic_store_explicit(counter, atomic_load_explicit(counter, memory_order_relaxed) + 1, memory_order_relaxed);
}

static inline int64_t gvls_waiting_threads(unsigned ractor) {
    uint64_t acquired = atomic_load_explicit(&gvls_metrics.ractors[ractor].acquired, memory_order_relaxed);
    uint64_t abandoned = atomic_load_explicit(&gvls_metrics.ractors[ractor].abandoned, memory_order_relaxed);
    uint64_t readied = atomic_load_explicit(&gvls_metrics.ractors[ractor].readied, memory_order_relaxed);
    return (int64_t)(readied - acquired - abandoned);
}

void gvls_metrics_init(VALUE mNative);
// A consistent copy of a slot's metrics (all of them, or only the state and the four time
// counters: what gvls_metrics_counters_now needs), written by no hook halfway (metrics_event.h).
void gvls_metrics_read(const gvls_thread *slot, gvls_thread_metrics *out, int with_histograms);
// A thread's run, wait, idle and GC ns so far, the state it is in counted up to now_ns, and its
// io_overlap_wait_ns (counted when a blocking release confirms it: no part in progress).
// wait_ns_at_wake (may be NULL): wait_ns when the thread last came back from idle, GVLS_NEVER_WOKE
// if it has not since counting began.
#define GVLS_NEVER_WOKE UINT64_MAX
#define GVLS_COUNTERS_NOW 5
void gvls_metrics_counters_now(const gvls_thread *slot, uint64_t now_ns, uint64_t out[GVLS_COUNTERS_NOW],
                               uint64_t *wait_ns_at_wake);
// The GVL wait of the slot's thread in [from_ns, now_ns], from its last GVLS_WAIT_LOG waits and the one
// in progress. exact (may be NULL): 0 when older waits than the log holds may fall in the window (the
// result is then a lower bound). wait_ns_now (may be NULL): its wait_ns, counted up to now_ns.
uint64_t gvls_metrics_wait_since(const gvls_thread *slot, uint64_t from_ns, uint64_t now_ns, int *exact,
                                 uint64_t *wait_ns_now);
// A request or job starts on the calling thread, whose slot this is (request_timing.c): the waits
// pending for IO it started before (metrics_event.h) are not the request's, and are dropped.
void gvls_metrics_request_started(gvls_thread *slot);
// In a forked child: every other thread is gone, and the parent's counters are not the child's.
void gvls_metrics_after_fork(void);

#endif
