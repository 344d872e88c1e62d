// Hand-offs of work between threads before a request or job starts (handoff.c).
#ifndef GVLSCOPE_HANDOFF_H
#define GVLSCOPE_HANDOFF_H

#include "gvlscope.h"
#include "thread_state.h"
#include <stdint.h>

// Work handed to a thread (a connection a Puma server thread accepted, a job a Sidekiq processor
// fetched), taken by the next request or job that thread starts (request_timing.c).
typedef struct gvls_handoff {
    int set;
    int exact;                // every wait of the window was still in the threads' wait logs
    uint64_t arrival_ns;      // when the work reached the process, as far as the threads know
    uint64_t carried_wait_ns; // GVL wait from arrival until the hand-off, on the thread that handed it over
    uint64_t handoff_ns;      // when that thread handed it over (a job fetch: when it arrived)
    uint64_t wait_base_ns;    // this thread's wait_ns at the hand-off (its wait since counts too)
    uint64_t idle_base_ns;    // its idle_ns when it took the work: blocked on the way from then on
    uint64_t woke_ns;         // when it woke from its longest block since its last start (0: none)
} gvls_handoff;

void gvls_handoff_init(VALUE mNative);
void gvls_handoff_after_fork(void);
extern int gvls_handoff_rack;            // GVLScope::Rack claims Puma's stamps (Handoffs.install_puma)
extern uint64_t gvls_handoff_pending;    // ...while some are not claimed
int gvls_handoff_fd_of_env(VALUE env);  // ...by env["puma.socket"]: its descriptor, or -1
// With the GVL, on the slot's own thread as its request starts at now_ns: the stamp of connection
// fd, if any (then 1, and *out is it). Drops any ticket the thread had.
int gvls_handoff_claim(gvls_thread *slot, int fd, uint64_t now_ns, gvls_handoff *out);
// With the GVL, on the slot's own thread as its request or job starts: the work handed to it, if
// any (then 1, and *out is it), which is taken: the next start finds none.
int gvls_handoff_take(const gvls_thread *slot, gvls_handoff *out);

#endif
