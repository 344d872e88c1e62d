// The one way gvlscope reads time: nanoseconds on CLOCK_MONOTONIC's scale. Every timestamp in
// traces and metrics comes from here.
//
// Why not just clock_gettime: on our machines it costs ~25 ns, as much as the whole rest of the
// hook. Where the TSC is invariant (constant_tsc and nonstop_tsc: same rate on every core, in
// every power state), rdtsc costs ~10 ns; clock.c calibrates it against CLOCK_MONOTONIC once and
// the hook converts ticks to ns with one 128-bit multiply. GVLSCOPE_CLOCK=monotonic turns it off.
#ifndef GVLSCOPE_CLOCK_H
#define GVLSCOPE_CLOCK_H

#include <stdint.h>
#include <time.h>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

typedef struct {
    int use_tsc;
    uint64_t tsc_base;          // rdtsc at calibration
    uint64_t ns_base;           // CLOCK_MONOTONIC at the same moment
    uint64_t ns_per_tick_q32;   // ns per tick, 32.32 fixed point
} gvls_clock_calibration;

extern gvls_clock_calibration gvls_clock;

static inline uint64_t gvls_monotonic_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline uint64_t gvls_now_ns(void) {
#if defined(__x86_64__)
    if (__builtin_expect(gvls_clock.use_tsc, 1)) {
        uint64_t tsc = __rdtsc();
        uint64_t ticks = tsc > gvls_clock.tsc_base ? tsc - gvls_clock.tsc_base : 0;  // a core a few ticks behind the calibrating one
        return gvls_clock.ns_base + (uint64_t)(((unsigned __int128)ticks * gvls_clock.ns_per_tick_q32) >> 32);
    }
#endif
    return gvls_monotonic_ns();
}

// The kernel's clock for a TCP connection's bytes counts jiffies (HZ 250 on Debian's kernels:
// 4 ms; 1,000 elsewhere: 1 ms). Two readings of it are this far apart at most.
#define GVLS_KERNEL_SLACK_NS 4000000ull

// When the last bytes to reach a TCP socket arrived (a request's), on this clock, by the kernel:
// now_ns minus tcpi_last_data_recv (ms); at accept with nothing received yet, when the connection
// was established. 0 for any other descriptor (a Unix socket, a pipe), or if the kernel does not say.
uint64_t gvls_kernel_data_arrival_ns(int fd, uint64_t now_ns);

void gvls_clock_init(void);
const char *gvls_clock_source(void);

#endif
