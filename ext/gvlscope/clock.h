// The one way gvlscope reads time: CLOCK_MONOTONIC in nanoseconds. Every timestamp in traces and
// metrics comes from here, so swapping in rdtsc later is a one-file change.
#ifndef GVLSCOPE_CLOCK_H
#define GVLSCOPE_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t gvls_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#endif
