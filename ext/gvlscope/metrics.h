// Consumer 1, metrics: always-on counters and histograms updated from the hook (metrics_event.h),
// read here: enable, reset, snapshots (metrics.c).
#ifndef GVLSCOPE_METRICS_H
#define GVLSCOPE_METRICS_H

#include "thread_state.h"
#include "metrics_event.h"  // the hot path's state and types, which snapshots read
#include <stdatomic.h>

void gvls_metrics_init(VALUE mNative);
// Native.metrics_snapshot's packed rows: serial, ractor_id, state, exited, then the counters in
// Metrics::COUNTERS' order (run, wait, idle, gc, holds, waits, longest hold and wait, released
// blocking, preempted and at exit, io_overlap_wait), each a little-endian uint64.
#define COUNTER_FIELDS 12
#define ROW_FIELDS (4 + COUNTER_FIELDS)
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
