// GVLScope::RequestTiming's numbers for breakdown.c (request_timing.c). Apart from gvlscope.h,
// which the Init file implements: a file that uses these would otherwise use the Init file's
// module, which uses it back (script/check-c-layers).
#ifndef GVLSCOPE_REQUEST_TIMING_H
#define GVLSCOPE_REQUEST_TIMING_H

#include "gvlscope.h"
#include <stdint.h>

// A request's numbers (ns), in this order, named for Ruby by GVLS_REQUEST_VALUE_NAMES (GVLScope::Breakdown's
// series read them from there): the one list of what a series sums.
#define GVLS_REQUEST_VALUE_NAMES \
    "run_ns", "wait_ns", "idle_ns", "gc_ns", "duration_ns", "pickup_wait_ns", "io_overlap_wait_ns", "queue_latency_ns", \
    "loop_wait_ns"
#define GVLS_REQUEST_VALUES 9
int gvls_request_timing_values(VALUE obj, uint64_t out[GVLS_REQUEST_VALUES]);
void gvls_request_timing_finish_values(VALUE timing, uint64_t out[GVLS_REQUEST_VALUES]);
VALUE gvls_request_timing_start_current(int handed_fd, int loop_fd);
VALUE gvls_request_timing_respond(VALUE timing, VALUE response, VALUE add_header);

#endif
