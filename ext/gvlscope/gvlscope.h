#ifndef GVLSCOPE_H
#define GVLSCOPE_H

#include <ruby.h>
#include <ruby/debug.h>
#include <ruby/thread.h>

// Each module's Ruby-visible functions, defined by Init_gvlscope (gvlscope.c).
void gvlscope_probe_init(VALUE mNative);
void gvls_trace_session_init(VALUE mNative);
void gvls_sink_file_init(VALUE mNative);
void gvls_sink_ring_init(VALUE mNative);
void gvls_request_timing_init(VALUE mGVLScope);
void gvls_request_timing_loop_init(void);  // RequestTiming.start_on_loop: after gvls_request_timing_init
void gvls_breakdown_init(VALUE mNative);
void gvls_live_answer_init(VALUE mNative);
// A request's numbers for breakdown.c: request_timing.h.
// Hand-offs of work between threads before a request or job starts: handoff.h.
void gvls_debug_init(VALUE mNative);  // test-only: debug.c

#endif
