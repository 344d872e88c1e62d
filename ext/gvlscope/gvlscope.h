#ifndef GVLSCOPE_H
#define GVLSCOPE_H

#include <ruby.h>
#include <ruby/debug.h>
#include <ruby/thread.h>

void gvlscope_probe_init(VALUE mNative);
void gvls_trace_session_init(VALUE mNative);
void gvls_request_timing_init(VALUE mGVLScope);

#endif
