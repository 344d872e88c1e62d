// Event loops: the fibers of a thread with a Fiber scheduler (Falcon, async), which take turns at
// the thread as threads take turns at the GVL (fibers.c).
#ifndef GVLSCOPE_FIBERS_H
#define GVLSCOPE_FIBERS_H

#include "gvlscope.h"
#include "thread_state.h"
#include "metrics.h"
#include <stdint.h>

// The turn the calling task runs in: when the thread's loop gave the thread to a task (the caller's,
// or the one that started it), and when the loop last came back from idle (its select) before that.
typedef struct gvls_loop_turn {
    uint64_t started_ns;
    uint64_t loop_woke_ns;  // 0: the loop did not block since it last got the thread
} gvls_loop_turn;

void gvls_fibers_init(VALUE mNative);
// A loop's row in Native.loop_turns and Native.loop_rows, declared once: X(name for Ruby, index
// name, its value from row, a thread's loop_row of fibers.c), then the log2 histogram of turn
// lengths (turn_histogram). Native::LOOP_ROW names them for Ruby.
#define GVLS_LOOP_ROW(X)                                                                             \
    X(serial, SERIAL, row->serial) X(turns, TURNS, row->loop.turns) X(busy_ns, BUSY_NS, row->loop.busy_ns) \
    X(longest_turn_ns, LONGEST_NS, row->loop.longest_turn_ns)
#define GVLS_LOOP_ROW_INDEX(name, index, value) GVLS_LOOP_ROW_##index,
enum { GVLS_LOOP_ROW(GVLS_LOOP_ROW_INDEX) GVLS_LOOP_ROW_HISTOGRAM };
#define GVLS_LOOP_ROW_FIELDS (GVLS_LOOP_ROW_HISTOGRAM + GVLS_HISTOGRAM_BUCKETS)
// Whether the caller runs on a task of an event loop (a non-blocking fiber under a Fiber scheduler),
// looked for only where requests may (gvls_fibers_requests: an Async server's process, or loops
// tracked). Turns tracking on the first time it finds one (a request on a fiber server): that
// request's turn is unknown.
extern int gvls_fibers_requests;
int gvls_fibers_on_task(void);
// With the GVL, on the slot's own thread, from a task: its turn, if known (then 1).
int gvls_fibers_turn(const gvls_thread *slot, gvls_loop_turn *out);
// A request's own time on a task: from now, the thread's counters (given, read now) count for the
// calling fiber only while it holds the thread. 1 if it is counted (turns tracked, memory for it).
int gvls_fibers_own_start(const gvls_thread *slot, const uint64_t counters[GVLS_COUNTERS_NOW]);
// The fiber's counters since its start, its stretch in progress counted up to now_ns; 0 if it has
// none (never started, stopped, or its slot's thread is not the one given).
// *loop_wait_ns: its waits for the loop since its start, while ready (a socket's bytes come, a sleep
// over, unblocked) but suspended; out's GVL wait includes its thread's meanwhile.
int gvls_fibers_own_counters(VALUE fiber, const gvls_thread *slot, uint64_t now_ns, uint64_t out[GVLS_COUNTERS_NOW],
                             uint64_t *loop_wait_ns);
// When a task's socket's bytes came (data_ns, the kernel's, a jiffy coarse): the loop's return
// from its select (loop_woke_ns, 0: none) when that came within a jiffy of them (the loop was idle
// when they came, and they woke it: exact); else the kernel's a jiffy late (a lower bound on the wait).
uint64_t gvls_fibers_arrival_ns(uint64_t data_ns, uint64_t loop_woke_ns);
void gvls_fibers_own_stop(VALUE fiber);
// The descriptor of the connection a Rack request on a fiber server came on: Falcon's
// (env["protocol.http.request"].connection.stream.io), else -1. Never raises.
int gvls_fibers_fd_of_env(VALUE env);
// In the GVL hook, on the slot's own thread before it releases the GVL: whether a task of its loop
// holds the turn, in the trace now recording (its turn records are in it). No allocation, no lock.
int gvls_fibers_in_task_turn(const gvls_thread *slot);

#endif
