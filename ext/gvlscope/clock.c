// Calibration of the TSC clock used by clock.h (see there for why).
#include "clock.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stddef.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

gvls_clock_calibration gvls_clock;

#if defined(__x86_64__)
static int cpu_has_invariant_tsc(void) {
    FILE *cpuinfo = fopen("/proc/cpuinfo", "r");
    if (!cpuinfo) return 0;
    char line[4096];
    int invariant = 0;
    while (fgets(line, sizeof(line), cpuinfo)) {
        if (strncmp(line, "flags", 5) == 0) {
            invariant = strstr(line, " constant_tsc") && strstr(line, " nonstop_tsc");
            break;
        }
    }
    fclose(cpuinfo);
    return invariant;
}
#endif

#if defined(__x86_64__)
// The monotonic clock and the TSC at the same moment: the TSC midway through the narrowest of 8
// brackets (rdtsc, clock_gettime, rdtsc), the one no preemption or interrupt fell in.
// stall_us: a test's preemption in the first bracket (GVLSCOPE_TEST_CALIBRATION_STALL_US).
static void read_both(uint64_t *tsc, uint64_t *ns, long stall_us) {
    uint64_t narrowest = UINT64_MAX;
    for (int i = 0; i < 8; i++) {
        uint64_t before = __rdtsc();
        if (i == 0 && stall_us > 0) usleep((useconds_t)stall_us);
        uint64_t now_ns = gvls_monotonic_ns(), after = __rdtsc();
        if (after < before || after - before >= narrowest) continue;
        narrowest = after - before;
        *tsc = before + narrowest / 2;
        *ns = now_ns;
    }
    if (narrowest == UINT64_MAX) { *tsc = __rdtsc(); *ns = gvls_monotonic_ns(); }
}
#endif

void gvls_clock_init(void) {
    gvls_clock.use_tsc = 0;
#if defined(__x86_64__)
    const char *wanted = getenv("GVLSCOPE_CLOCK");
    if ((wanted && strcmp(wanted, "monotonic") == 0) || !cpu_has_invariant_tsc()) return;
    // Two readings of both clocks 2 ms apart: the ~25 ns uncertainty of each reading gives a rate
    // error near 1e-5, i.e. 10 us per second of trace at worst. Each reading is the tightest of a
    // few TSC brackets around the monotonic read: a thread preempted between its two reads (a
    // loaded machine) made a rate off by the preemption over 2 ms, 5x for one timeslice, and every
    // duration of the process as wrong (an interval of 0.5 s read as 0.106 s).
    const char *stall = getenv("GVLSCOPE_TEST_CALIBRATION_STALL_US");
    long stall_us = stall ? strtol(stall, NULL, 10) : 0;
    uint64_t tsc0, ns0, tsc1, ns1;
    read_both(&tsc0, &ns0, stall_us);
    do { ns1 = gvls_monotonic_ns(); } while (ns1 - ns0 < 2000000);
    read_both(&tsc1, &ns1, 0);
    if (tsc1 <= tsc0 || ns1 <= ns0) return;
    gvls_clock.tsc_base = tsc0;
    gvls_clock.ns_base = ns0;
    gvls_clock.ns_per_tick_q32 = (uint64_t)(((unsigned __int128)(ns1 - ns0) << 32) / (tsc1 - tsc0));
    gvls_clock.use_tsc = 1;
#endif
}

const char *gvls_clock_source(void) {
    return gvls_clock.use_tsc ? "tsc" : "monotonic";
}

uint64_t gvls_kernel_data_arrival_ns(int fd, uint64_t now_ns) {
    struct tcp_info info;
    socklen_t len = sizeof(info);
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0 || len < offsetof(struct tcp_info, tcpi_last_data_recv) + sizeof(info.tcpi_last_data_recv))
        return 0;
    uint64_t ago_ns = (uint64_t)info.tcpi_last_data_recv * 1000000ull;
    return now_ns > ago_ns ? now_ns - ago_ns : 0;
}
