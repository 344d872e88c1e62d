// Consumer 1, metrics: always-on counters and histograms updated from the hook (metrics_event.h),
// read here: enable, reset, snapshots (metrics.c).
#ifndef GVLSCOPE_METRICS_H
#define GVLSCOPE_METRICS_H

#include "thread_state.h"
#include "metrics_event.h"  // the hot path's state and types, which snapshots read
#include <stdatomic.h>

void gvls_metrics_init(VALUE mNative);
// A thread's counters, declared once, in the order of Native.metrics_snapshot's packed rows:
// X(field of gvls_thread_metrics, how rows add up: SUM, or MAX for a longest). The rows, the exited
// threads' totals, the live answer's JSON and Native::THREAD_COUNTERS (Metrics::ThreadRow's fields,
// Metrics::MAX_COUNTERS) all come from this list.
#define GVLS_THREAD_COUNTERS(X)                                                                      \
    X(run_ns, SUM) X(wait_ns, SUM) X(idle_ns, SUM) X(gc_ns, SUM) X(holds, SUM) X(waits, SUM)         \
    X(longest_hold_ns, MAX) X(longest_wait_ns, MAX) X(released_blocking, SUM)                        \
    X(released_preempted, SUM) X(released_exit, SUM) X(io_overlap_wait_ns, SUM)
// A packed row: these (Native::THREAD_ROW names them), then the counters; each a little-endian uint64.
#define GVLS_THREAD_ROW_IDENTITY(X) X(serial) X(ractor_id) X(state) X(exited)
#define GVLS_COUNTER_INDEX(name, sum) GVLS_COUNTER_##name,
#define GVLS_ROW_INDEX(name) GVLS_ROW_##name,
enum { GVLS_THREAD_COUNTERS(GVLS_COUNTER_INDEX) COUNTER_FIELDS };
enum { GVLS_THREAD_ROW_IDENTITY(GVLS_ROW_INDEX) GVLS_ROW_COUNTERS };
#define ROW_FIELDS (GVLS_ROW_COUNTERS + COUNTER_FIELDS)
// A consistent copy of a slot's metrics (all of them, or only the state and the counters, no
// histograms: what gvls_metrics_counters_now needs), written by no hook halfway (metrics_event.h).
void gvls_metrics_read(const gvls_thread *slot, gvls_thread_metrics *out, int with_histograms);
// A thread's counters a request takes deltas of (request_timing.c, fibers.c), in this order:
// X(index name, its value from m, a gvls_thread_metrics copied with GVLS_THREAD_COUNTERS). OVERLAP:
// counted when a blocking release confirms it, no part in progress.
#define GVLS_NOW_COUNTERS(X)                                                                         \
    X(RUN, m.run_ns) X(WAIT, m.wait_ns) X(IDLE, m.idle_ns) X(GC, m.gc_ns) X(OVERLAP, m.io_overlap_wait_ns) \
    X(RELEASES, m.released_blocking + m.released_preempted + m.released_exit)
#define GVLS_NOW_INDEX(name, value) GVLS_NOW_##name,
enum { GVLS_NOW_COUNTERS(GVLS_NOW_INDEX) GVLS_COUNTERS_NOW };
// Those counters so far, the state the thread is in counted up to now_ns.
// wait_ns_at_wake (may be NULL): wait_ns when the thread last came back from idle, GVLS_NEVER_WOKE
// if it has not since counting began.
#define GVLS_NEVER_WOKE UINT64_MAX
void gvls_metrics_counters_now(const gvls_thread *slot, uint64_t now_ns, uint64_t out[GVLS_COUNTERS_NOW],
                               uint64_t *wait_ns_at_wake);
// The GVL wait of the slot's thread in [from_ns, now_ns], from its last GVLS_WAIT_LOG waits and the one
// in progress. exact (may be NULL): 0 when older waits than the log holds may fall in the window (the
// result is then a lower bound). wait_ns_now (may be NULL): its wait_ns, counted up to now_ns.
uint64_t gvls_metrics_wait_since(const gvls_thread *slot, uint64_t from_ns, uint64_t now_ns, int *exact,
                                 uint64_t *wait_ns_now);
// The same for the caller's own slot (the thread calling, with the GVL), read in place.
uint64_t gvls_metrics_own_wait_since(const gvls_thread *slot, uint64_t from_ns, uint64_t now_ns, int *exact,
                                     uint64_t *wait_ns_now);
// For the caller's own slot, in one pass over its wait log: when work that came within
// [from_ns, to_ns] arrived, the start of the latest wait that began in that window (a wait after
// a blocking release begins when the thread woke: a select's return), else to_ns (at most now_ns,
// a bound); *wait_since_ns: the thread's wait from then to now_ns; *exact as gvls_metrics_wait_since.
uint64_t gvls_metrics_own_arrival(const gvls_thread *slot, uint64_t from_ns, uint64_t to_ns, uint64_t now_ns,
                                  uint64_t *wait_since_ns, int *exact);
// A request or job starts on the calling thread, whose slot this is (request_timing.c): the waits
// pending for IO it started before (metrics_event.h) are not the request's, and are dropped.
void gvls_metrics_request_started(gvls_thread *slot);
// fn runs after the metrics went on or off (Init passes the hook's sync): the metrics are
// below the hook, which runs their event code, so they switch it through this, never by name.
void gvls_metrics_on_switch(void (*fn)(void));
// In a forked child: every other thread is gone, and the parent's counters are not the child's.
void gvls_metrics_after_fork(void);

#endif
