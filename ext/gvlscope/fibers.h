// Event loops: the fibers of a thread with a Fiber scheduler (Falcon, async), which take turns at
// the thread as threads take turns at the GVL (fibers.c).
#ifndef GVLSCOPE_FIBERS_H
#define GVLSCOPE_FIBERS_H

#include "gvlscope.h"
#include "thread_state.h"
#include <stdint.h>

// The turn the calling task runs in: when the thread's loop gave the thread to a task (the caller's,
// or the one that started it), and when the loop last came back from idle (its select) before that.
typedef struct gvls_loop_turn {
    uint64_t started_ns;
    uint64_t loop_woke_ns;  // 0: the loop did not block since it last got the thread
} gvls_loop_turn;

void gvls_fibers_init(VALUE mNative);
// Whether the caller runs on a task of an event loop (a non-blocking fiber under a Fiber scheduler),
// looked for only where requests may (gvls_fibers_requests: an Async server's process, or loops
// tracked). Turns tracking on the first time it finds one (a request on a fiber server): that
// request's turn is unknown.
extern int gvls_fibers_requests;
int gvls_fibers_on_task(void);
// With the GVL, on the slot's own thread, from a task: its turn, if known (then 1).
int gvls_fibers_turn(const gvls_thread *slot, gvls_loop_turn *out);
// The descriptor of the connection a Rack request on a fiber server came on: Falcon's
// (env["protocol.http.request"].connection.stream.io), else -1. Never raises.
int gvls_fibers_fd_of_env(VALUE env);
// In the GVL hook, on the slot's own thread before it releases the GVL: whether a task of its loop
// holds the turn, in the trace now recording (its turn records are in it). No allocation, no lock.
int gvls_fibers_in_task_turn(const gvls_thread *slot);

#endif
