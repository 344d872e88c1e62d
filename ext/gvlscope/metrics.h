// Consumer 1, metrics: always-on counters and histograms updated from the hook.
#ifndef GVLSCOPE_METRICS_H
#define GVLSCOPE_METRICS_H

#include "thread_state.h"
#include <stdatomic.h>

enum gvls_metric_state { GVLS_M_UNKNOWN = 0, GVLS_M_READY, GVLS_M_RUNNING, GVLS_M_SUSPENDED, GVLS_M_DEAD };

#define GVLS_MAX_RACTORS 64   // Ractor ids beyond share the last slot

typedef struct gvls_metrics_global {
    _Atomic int enabled;
    _Atomic int64_t waiting_threads[GVLS_MAX_RACTORS];  // per Ractor: READY, not yet RESUMED
    _Atomic uint64_t resume_seq[GVLS_MAX_RACTORS];      // RESUMED count per Ractor (yield detection)
    uint64_t epoch_ns;          // enable/reset time: nothing before it is counted
    uint64_t timeslice_ns;      // a release after >= half of this while others wait is a preemption
} gvls_metrics_global;

extern gvls_metrics_global gvls_metrics;

void gvls_metrics_event(unsigned kind, gvls_thread *slot, uint64_t now_ns);
void gvls_metrics_init(VALUE mNative);
// In a forked child: every other thread is gone, and the parent's counters are not the child's.
void gvls_metrics_after_fork(void);

#endif
