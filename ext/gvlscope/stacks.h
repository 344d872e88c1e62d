// Code locations in a trace (a trace "with stacks"): the Ruby frames at a thread's own release of
// the GVL (its release site) while another thread waits, and the holder's stack sampled at
// RUBY_INTERNAL_EVENT_SWITCH (the timer's ~10 ms tick, which runs only while some thread waits).
// Frames are interned into fixed-size tables allocated at start: the hook never allocates; a
// full table drops the stack, counted. Tables are resolved to labels and paths at stop (or at a
// flight recorder dump) into the stacks chunk (format.h). Always-on metrics never read frames.
#ifndef GVLSCOPE_STACKS_H
#define GVLSCOPE_STACKS_H

#include "gvlscope.h"
#include "thread_state.h"
#include "trace.h"
#include "trace_framing.h"
#include <stdatomic.h>

typedef struct {
    _Atomic int on;           // a trace with stacks records: read by the hook on every event
    // Threads that fired READY and not yet RESUMED/EXITED (any Ractor).
    _Atomic int64_t waiting;
} gvls_stacks_state;

extern gvls_stacks_state gvls_stacks;

// Out of line: reads frames (only while someone waits, or while a loop's task holds its turn: a
// blocking call there stalls every fiber of the loop; the cost stays off the fast path).
void gvls_stacks_record_site(gvls_thread *slot, uint64_t now_ns);
// fibers.c, when it starts (or stops: NULL) tracking loops: its query "does a task of this slot's
// loop hold a turn begun in this trace?", asked at a release nobody waits for whose thread's
// loop_task_turn is set. A pointer: stacks is below fibers.
void gvls_stacks_loop_turns(int (*in_task_turn)(const gvls_thread *slot));
// With the GVL, in a Ruby event hook on the running fiber: its own frames as a release site's, the
// stack id (counted as a site), or 0 (none, dropped, or no trace with stacks).
uint32_t gvls_stacks_capture_site(void);

// After the trace recorded the event. The waiting count and the thread's loop flag decide whether
// a release is worth its site: with nobody waiting and no loop task's turn held, the sysread fast
// path pays two counter updates and no frame reads.
static inline void gvls_stacks_event(unsigned kind, gvls_thread *slot, uint64_t now_ns) {
    switch (kind) {
      case GVLS_EV_READY:
        // A second READY (M:N parking) is not a second waiter. CRuby orders one thread's events.
        if (!slot->stacks_waiting) { slot->stacks_waiting = 1; atomic_fetch_add_explicit(&gvls_stacks.waiting, 1, memory_order_relaxed); }
        return;
      case GVLS_EV_RESUMED:
      case GVLS_EV_EXITED:
        if (slot->stacks_waiting) { slot->stacks_waiting = 0; atomic_fetch_sub_explicit(&gvls_stacks.waiting, 1, memory_order_relaxed); }
        return;
      case GVLS_EV_SUSPENDED:
        if (atomic_load_explicit(&gvls_stacks.waiting, memory_order_relaxed) > 0 || slot->loop_task_turn) {
            gvls_stacks_record_site(slot, now_ns);
        }
        return;
    }
}

// With the GVL, on the thread that holds it: its stack as a holder sample (SAMPLE and its ARG),
// while a trace with stacks records. The SWITCH sampler's, and fibers.c's for a long loop turn.
void gvls_stacks_sample_running(void);

void gvls_stacks_init(void);
// With the GVL, before the hook goes on: allocates the tables, turns on the SWITCH sampler.
// Returns 0 or ENOMEM.
int gvls_stacks_start(void);
// With the GVL, once the hook is off: no more frames are read; the tables stay for the writer.
void gvls_stacks_pause(void);
// Frees the tables (after the stacks chunk was written).
void gvls_stacks_free(void);
// Whether tables exist (a trace with stacks runs or is stopping): its files carry GVLS_FILE_STACKS.
int gvls_stacks_active(void);
// The stacks chunk of what was interned so far; 0 or an errno. With the GVL (resolves labels).
int gvls_write_stacks_chunk(const gvls_out *out);
// In a forked child: the parent's tables are not the child's (no Ruby calls but the tracepoint's).
void gvls_stacks_after_fork(void);

#endif
