// GVLScope::RequestTiming's numbers for breakdown.c (request_timing.c). Apart from gvlscope.h,
// which the Init file implements: a file that uses these would otherwise use the Init file's
// module, which uses it back (script/check-c-layers).
#ifndef GVLSCOPE_REQUEST_TIMING_H
#define GVLSCOPE_REQUEST_TIMING_H

#include "gvlscope.h"
#include <stdint.h>

// A request's numbers (ns, or a count), declared once, in this order: X(name, its value in put_values'
// terms (request_timing.c): the thread counters' deltas (GVLS_NOW_* of metrics.h), the finished or
// so-far duration_ns and loop_wait_ns, the timing; reader: READER, RequestTiming#name answers the
// value; OWN_READER, a reader of its own does). GVLScope::Breakdown's series sum them, named for
// Ruby by Native::BreakdownSeries::FIELDS: the one list of what a series sums.
#define GVLS_REQUEST_FIELDS(X)                                                                       \
    X(run_ns, deltas[GVLS_NOW_RUN], READER)                                                          \
    X(wait_ns, deltas[GVLS_NOW_WAIT], READER)                                                        \
    X(idle_ns, deltas[GVLS_NOW_IDLE], READER)                                                        \
    X(gc_ns, deltas[GVLS_NOW_GC], READER)                                                            \
    X(duration_ns, duration_ns, READER)                                                              \
    X(pickup_wait_ns, timing->pickup_wait_ns, READER)                                                \
    X(io_overlap_wait_ns, deltas[GVLS_NOW_OVERLAP], READER)                                          \
    X(queue_latency_ns, timing->queue_latency_ns, OWN_READER) /* nil when not told */                \
    X(loop_wait_ns, loop_wait_ns, READER)                                                            \
    X(releases, deltas[GVLS_NOW_RELEASES], READER) /* times it gave the GVL up: a count, not ns */
#define GVLS_REQUEST_INDEX(name, value, reader) GVLS_REQUEST_##name,
enum { GVLS_REQUEST_FIELDS(GVLS_REQUEST_INDEX) GVLS_REQUEST_VALUES };
int gvls_request_timing_values(VALUE obj, uint64_t out[GVLS_REQUEST_VALUES]);
void gvls_request_timing_finish_values(VALUE timing, uint64_t out[GVLS_REQUEST_VALUES]);
VALUE gvls_request_timing_start_current(int handed_fd, int loop_fd, VALUE env);
VALUE gvls_request_timing_respond(VALUE timing, VALUE response, VALUE add_header);

#endif
