// The metrics consumer's hot path, run by the hook for every event, and the state it updates
// (metrics_event.c defines it). metrics.c has the Ruby side: enable, reset, snapshots. Apart so
// that the hook, which runs this inline, uses nothing of the side that reads it (script/check-c-layers).
#ifndef GVLSCOPE_METRICS_EVENT_H
#define GVLSCOPE_METRICS_EVENT_H

#include "thread_state.h"
#include "format.h"
#include "histogram.h"
#include <stdatomic.h>

// A thread's state, in the words of lib/gvlscope/support/vocabulary.rb (METRIC_STATES lists them in this
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

#define M gvls_metrics

// A blocking release whose idle is shorter than this returned at once (a write with buffer room, a
// read that found nothing yet): 10-50 us for a loopback write on a quiet machine, several hundred
// on a busy one (the thread back from the syscall waits for a core). The IO that matters for how
// many threads to run (a database, an HTTP call) takes longer.
#define GVLS_QUICK_RELEASE_NS 1000000
// The longest hold between a call that started IO and the one that waits for its answer.
#define GVLS_OVERLAP_HOLD_NS 1000000

// A release is a preemption (the thread stayed runnable) when it held the GVL for at least half a
// timeslice, others wanted it, and READY follows SUSPENDED on the same native thread before any
// other thread of the Ractor got the GVL. Why the hold length: a blocking call that returns at
// once (a pipe read with data waiting) shows the same SUSPENDED-READY pair within microseconds.
// Thread.pass cannot be told from such a call and counts as blocking. See docs/format.md.

static inline unsigned ractor_slot(const gvls_thread *slot) {
    return slot->ractor_id < GVLS_MAX_RACTORS ? slot->ractor_id : GVLS_MAX_RACTORS - 1;
}

static inline uint64_t since_epoch(uint64_t start_ns) {
    return start_ns > M.epoch_ns ? start_ns : M.epoch_ns;
}

static inline uint64_t elapsed(uint64_t start_ns, uint64_t now_ns) {
    uint64_t start = since_epoch(start_ns);
    return now_ns > start ? now_ns - start : 0;
}

// A snapshot on another native thread (the main Ractor's, or a waker's) reads a slot while the
// hook about its thread writes it: the SUSPENDED that adds the hold to run_ns and then sets the state
// to idle, read halfway, counts the hold twice, and the next snapshot is lower. So the hook brackets
// its writes with a sequence number (odd while writing; one writer per slot at a time, CRuby orders
// a thread's events) and readers retry until they copied between two equal even values
// (gvls_metrics_read). Release/acquire fences are compiler barriers on x86-64: a load and 2 stores.
static inline __attribute__((always_inline)) uint32_t gvls_metrics_write_begin(gvls_thread *slot) {
    uint32_t seq = atomic_load_explicit(&slot->metrics_seq, memory_order_relaxed);
    atomic_store_explicit(&slot->metrics_seq, seq + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);  // the odd value is visible before any field changes
    return seq;
}

// seq: what gvls_metrics_write_begin returned (kept in a register: no second load).
static inline __attribute__((always_inline)) void gvls_metrics_write_end(gvls_thread *slot, uint32_t seq) {
    atomic_store_explicit(&slot->metrics_seq, seq + 2, memory_order_release);  // after every field
}

// Inline in the hook: one switch on the event kind for the hook and this, no call.
static inline __attribute__((always_inline)) void gvls_metrics_event(unsigned kind, gvls_thread *slot, uint64_t now_ns) {
    gvls_thread_metrics *m = &slot->metrics;
    unsigned ractor = ractor_slot(slot);
    switch (kind) {
      case GVLS_EV_READY:
        if (m->state == GVLS_STATE_WAIT) return;  // a second READY (M:N parking): one wait
        if (m->state == GVLS_STATE_IDLE) {
            m->yielded = m->others_wanted && m->last_hold_ns >= M.timeslice_ns / 2 &&
                         m->suspend_native == gvls_native_serial() &&
                         atomic_load_explicit(&M.ractors[ractor].resume_seq, memory_order_relaxed) == m->resume_seq_at_suspend;
            if (m->yielded) {
                // The wait for the GVL began at SUSPENDED: keep since_ns.
                m->released_preempted++;
                m->woke_at_once = 0;
            } else {
                uint64_t idle = elapsed(m->since_ns, now_ns);
                m->released_blocking++;
                m->idle_ns += idle;
                // A release that blocked, after waits that followed ones that did not: the IO those
                // calls started (a write's answer) was in flight during the waits (thread_state.h).
                m->woke_at_once = idle < GVLS_QUICK_RELEASE_NS;
                if (!m->woke_at_once) {
                    m->io_overlap_wait_ns += m->pending_overlap_ns;
                    m->pending_overlap_ns = 0;
                }
                // Where a request's pickup wait starts: a server thread woken for work (RequestTiming).
                m->wait_ns_at_wake = m->wait_ns;
                m->woke_ns = now_ns;
                // A server thread's wait for work, or a job runner's for a job (handoff.c).
                if (idle >= m->mark_longest_idle_ns) {
                    m->mark_longest_idle_ns = idle;
                    m->mark_longest_idle_woke_ns = now_ns;
                    m->mark_longest_idle_wait_ns = m->wait_ns;
                }
                m->since_ns = now_ns;
            }
        } else {
            m->yielded = 0;
            m->woke_at_once = 0;
            m->since_ns = now_ns;
        }
        m->state = GVLS_STATE_WAIT;
        gvls_ractor_add(&M.ractors[ractor].readied, ractor);
        return;

      case GVLS_EV_RESUMED: {
        // Readers of resume_seq only compare it for equality (see metrics.h for why adds are plain).
        gvls_ractor_add(&M.ractors[ractor].resume_seq, ractor);
        if (m->state == GVLS_STATE_WAIT) {
            gvls_ractor_add(&M.ractors[ractor].acquired, ractor);
            int64_t still_waiting = gvls_waiting_threads(ractor);
            uint64_t waited = elapsed(m->since_ns, now_ns);
            m->wait_ns += waited;
            unsigned logged = (unsigned)m->waits & (GVLS_WAIT_LOG - 1);
            m->wait_log_start[logged] = now_ns - waited;
            m->wait_log_end[logged] = now_ns;
            m->waits++;
            if (waited > m->longest_wait_ns) m->longest_wait_ns = waited;
            m->wait_histogram[gvls_log2_bucket(waited)]++;
            m->waiters_histogram[gvls_log2_bucket(still_waiting > 0 ? (uint64_t)still_waiting : 0)]++;
            if (m->woke_at_once) m->pending_overlap_ns += waited;
        }
        m->state = GVLS_STATE_RUN;
        m->since_ns = m->hold_started_ns = now_ns;
        return;
      }

      case GVLS_EV_SUSPENDED: {
        if (m->state == GVLS_STATE_RUN) {
            uint64_t held = elapsed(m->hold_started_ns, now_ns);
            m->run_ns += elapsed(m->since_ns, now_ns);
            m->holds++;
            m->last_hold_ns = held;
            if (held > m->longest_hold_ns) m->longest_hold_ns = held;
            m->hold_histogram[gvls_log2_bucket(held)]++;
            // Between a call and the wait for its answer a client runs microseconds of Ruby; a
            // longer hold is other work, and the waits before it were not that IO's.
            if (held >= GVLS_OVERLAP_HOLD_NS) m->pending_overlap_ns = 0;
        }
        m->others_wanted = gvls_waiting_threads(ractor) > 0;
        m->suspend_native = gvls_native_serial();
        m->resume_seq_at_suspend = atomic_load_explicit(&M.ractors[ractor].resume_seq, memory_order_relaxed);
        m->state = GVLS_STATE_IDLE;
        m->since_ns = now_ns;
        return;
      }

      // The state in progress ends here, counted where a snapshot counted it so far (metrics.c,
      // in_progress): an exited thread's counters, and the totals it is retired into, never go back.
      case GVLS_EV_EXITED:
        if (m->state == GVLS_STATE_IDLE) { m->idle_ns += elapsed(m->since_ns, now_ns); m->released_exit++; }
        else if (m->state == GVLS_STATE_RUN) {
            if (m->gc_started_ns) m->gc_ns += elapsed(m->gc_started_ns, now_ns);
            else m->run_ns += elapsed(m->since_ns, now_ns);
            m->released_exit++;
        } else if (m->state == GVLS_STATE_WAIT) {
            m->wait_ns += elapsed(m->since_ns, now_ns);
            gvls_ractor_add(&M.ractors[ractor].abandoned, ractor);
        }
        m->state = GVLS_STATE_EXITED;
        m->since_ns = now_ns;
        return;

      case GVLS_EV_GC_ENTER:
        if (m->state == GVLS_STATE_RUN) {
            m->run_ns += elapsed(m->since_ns, now_ns);
            m->gc_started_ns = now_ns;
            m->since_ns = now_ns;
        }
        return;

      case GVLS_EV_GC_EXIT:
        if (m->state == GVLS_STATE_RUN && m->gc_started_ns) {
            m->gc_ns += elapsed(m->gc_started_ns, now_ns);
            m->gc_started_ns = 0;
            m->since_ns = now_ns;
        }
        return;
    }
}

#undef M

#endif
