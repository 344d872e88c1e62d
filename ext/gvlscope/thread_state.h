#ifndef GVLSCOPE_THREAD_STATE_H
#define GVLSCOPE_THREAD_STATE_H

#include "gvlscope.h"
#include <stdatomic.h>
#include <stdint.h>

// What gvlscope keeps for one Ruby thread. Found from the hook through the one thread-specific
// storage key (a process has only 8 keys, shared by every gem). Created lazily on the first event
// for a thread, whichever native thread reports it; kept in the registry until the thread has
// exited and no trace needs it any more. Its Thread object is kept (marked) only until shortly
// after the thread exits: the release (gvls_threads_release_exited) then reads what a thread
// record needs of it, its name and creation site, and lets it go, so a long trace does not keep
// every exited thread's Thread (and on 3.4 its stack's mappings) alive.
#define GVLS_HISTOGRAM_BUCKETS 64
#define GVLS_WAIT_LOG 16  // a power of two: the ring's index is waits & (GVLS_WAIT_LOG - 1)

// Metrics of one thread: the metrics' (metrics_event.h, metrics.c), kept in the slot because the
// hook updates them on every event (a table of their own would cost a load per event). Written only by hook calls about this thread, which CRuby orders
// (READY, RESUMED and SUSPENDED of one thread never overlap in time), so plain fields suffice;
// snapshots read them racily, which on x86-64 gives each field's old or new value, never a mix.
typedef struct gvls_thread_metrics {
    uint8_t state;              // gvls_state: what the last event said
    uint8_t others_wanted;      // at SUSPENDED: another thread of the Ractor wanted the GVL
    uint8_t yielded;            // READY came straight after SUSPENDED: a preemption
    uint32_t suspend_native;    // native thread of the last SUSPENDED
    uint64_t resume_seq_at_suspend;
    uint64_t since_ns;          // when the current state began
    uint64_t hold_started_ns;   // RESUMED: start of the current hold
    uint64_t last_hold_ns;      // length of the hold that ended at the last SUSPENDED
    uint64_t gc_started_ns;
    uint64_t run_ns, wait_ns, idle_ns, gc_ns;
    uint64_t wait_ns_at_wake;   // wait_ns when idle last ended (READY after a blocking release)
    uint64_t woke_ns;           // ...and when (fibers.c: an event loop's last return from its select)
    // The longest idle since the thread's last hand-off mark (handoff.c), and when it ended: a
    // server thread's wait in a select for the next request, a job runner's wait for a job, not
    // the calls that returned at once around them (a nonblocking accept or read, a log write).
    uint64_t mark_longest_idle_ns, mark_longest_idle_woke_ns, mark_longest_idle_wait_ns;  // (wait_ns then)
    // IO in flight during a GVL wait: calls that returned at once (a write, a read that found no
    // data yet: READY within GVLS_QUICK_RELEASE_NS of SUSPENDED), the waits for the GVL after them,
    // then a release that blocks (the wait for the answer). The answer was on its way all along.
    uint8_t woke_at_once;         // the last blocking release's idle was shorter than GVLS_QUICK_RELEASE_NS
    uint64_t pending_overlap_ns;  // waits after such releases since the last one that blocked
    uint64_t io_overlap_wait_ns;  // the pending waits a blocking release confirmed (metrics_event.h)
    // The thread's last GVLS_WAIT_LOG waits, [start, end) ns: how long it waited since a moment in
    // the recent past (a request's hand-off), across the lock and IO releases in between.
    uint64_t wait_log_start[GVLS_WAIT_LOG], wait_log_end[GVLS_WAIT_LOG];
    uint64_t holds, waits, longest_hold_ns, longest_wait_ns;
    uint64_t released_blocking, released_preempted, released_exit;
    uint64_t hold_histogram[GVLS_HISTOGRAM_BUCKETS];     // log2 of ns held
    uint64_t wait_histogram[GVLS_HISTOGRAM_BUCKETS];     // log2 of ns waited for the GVL
    uint64_t waiters_histogram[GVLS_HISTOGRAM_BUCKETS];  // log2 of threads still waiting at acquire
    uint8_t retired;  // metrics.c, with the GVL: folded into the retired totals (no hook writes it)
} gvls_thread_metrics;

typedef struct gvls_thread {
    uint32_t serial;        // 1, 2, ...: the id in trace records (0 is never used)
    // 0, 1, ...: among the slots in the registry, reused once this one is freed. Consumers that
    // keep something per thread off the hot path (request_timing.c, handoff.c) index tables of
    // their own with it: the core struct carries no field of theirs.
    uint32_t index;
    uint32_t ractor_id;     // 1 = main Ractor; 0 = unknown
    VALUE thread;           // the Thread, marked by the registry until released; then Qfalse
    VALUE name, created_at; // once released: its name and creation site as read then ("" if none)
    _Atomic int exited;     // the EXITED hook has finished with this slot (release: see hook.c)
    _Atomic int release_queued;          // set by the EXITED hook: not freed until released
    struct gvls_thread *next_exited;     // the exited list (gvls_thread_exited)
    _Atomic uint32_t metrics_seq;   // odd while a hook writes metrics: snapshots retry (metrics_event.h)
    // stacks.h's, here (not in a table of its own) because the hook reads it on every event of a
    // trace with stacks: READY seen, not yet RESUMED (counted in gvls_stacks.waiting).
    int stacks_waiting;
    // fibers.c's, here for the same reason: a task of this thread's event loop holds the turn (set
    // by its fiber-switch hook on this thread, cleared when loops stop being tracked). A release then
    // stalls the whole loop: the hook reads the site even with nobody waiting for the GVL.
    int loop_task_turn;
    gvls_thread_metrics metrics;
} gvls_thread;

// What a thread record needs of a slot, copied: calling Ruby may run GC, whose mark takes the
// registry lock. thread (or, once released, name and created_at) stays marked while the slot is
// in the registry and no release runs (gvls_threads_release_pause).
typedef struct { VALUE thread, name, created_at; uint32_t serial, ractor_id; int exited; } gvls_thread_ref;
gvls_thread_ref gvls_thread_ref_of(const gvls_thread *slot);
// The thread's name ("" if none) and, if with_site, where it was created ("" if unknown): read
// from its Thread now (Thread#name, Thread#inspect: with the GVL; never raises), or what the
// release read if it was released.
void gvls_thread_label(const gvls_thread_ref *ref, int with_site, VALUE *name, VALUE *site);

// What consumers and sinks are told about slots. The thread state calls nothing above it by name
// (the hook and every consumer use it): each registers a listener at Init, with the GVL.
typedef struct gvls_slot_listener {
    // A slot was made: maybe in the hook, on any native thread, without the GVL, under the
    // registry lock: no locks, no Ruby calls, no allocation.
    void (*created)(gvls_thread *slot);
    // Under the registry lock: whether an exited slot is still needed (metrics not yet reported,
    // a trace's thread table still to list it). One that says so keeps it from being freed.
    int (*keeps)(const gvls_thread *slot);
    // With the GVL, while no hook runs: the slot's thread died unseen (no EXITED); now exited.
    void (*died_unseen)(gvls_thread *slot);
    // With the GVL of the main Ractor, under the registry lock: the slot is freed, and its index
    // may be given to a new slot (no Ruby calls).
    void (*freed)(gvls_thread *slot);
} gvls_slot_listener;
#define GVLS_SLOT_LISTENERS 8
void gvls_threads_listen(const gvls_slot_listener *listener);
// Set by hook.c as it installs and removes the hook: while it may run, a thread dead for
// Thread#alive? may still be inside its EXITED hook (gvls_threads_prune_dead waits).
void gvls_threads_hook_on(int on);
// Set by trace_session.c from a trace's start to the end of its stop, while its thread table is
// still to be written: exited threads keep their creation site, dead threads their slot.
void gvls_threads_table_open(int open);

void gvls_thread_state_init(void);
gvls_thread *gvls_thread_lookup(VALUE thread);
// The thread's slot if it has one; never creates one (for threads that may have exited).
gvls_thread *gvls_thread_find(VALUE thread);

// The last thread this native thread reported, and its slot: without M:N threads nearly every
// event is about the thread running the hook, so most lookups skip CRuby's thread-specific
// storage call. Valid while registry_generation is unchanged: pruning (which frees slots) and a
// thread's EXITED bump it, and a Thread object is marked by the registry at least until its
// EXITED (or its pruning), so it cannot have been reused for another thread before that; no event
// is about a thread after its EXITED.
typedef struct gvls_last_thread { VALUE thread; gvls_thread *slot; uint32_t generation; } gvls_last_thread;
extern __thread __attribute__((tls_model("initial-exec"))) gvls_last_thread gvls_last;
extern _Atomic uint32_t gvls_registry_generation;

static inline gvls_thread *gvls_thread_for(VALUE thread) {
    if (__builtin_expect(gvls_last.thread == thread, 1) &&
        __builtin_expect(gvls_last.generation == atomic_load_explicit(&gvls_registry_generation, memory_order_relaxed), 1)) {
        return gvls_last.slot;
    }
    gvls_thread *slot = gvls_thread_lookup(thread);
    if (slot) gvls_last = (gvls_last_thread){ thread, slot, atomic_load_explicit(&gvls_registry_generation, memory_order_relaxed) };
    return slot;
}
// gvls_thread_find with gvls_thread_for's shortcut (never creates a slot): once per web request.
static inline gvls_thread *gvls_thread_find_fast(VALUE thread) {
    if (__builtin_expect(gvls_last.thread == thread, 1) &&
        __builtin_expect(gvls_last.generation == atomic_load_explicit(&gvls_registry_generation, memory_order_relaxed), 1)) {
        return gvls_last.slot;
    }
    return gvls_thread_find(thread);
}
// Calls fn for each thread in the registry, under the registry lock (fn must not call Ruby
// code that can run hooks of ours that take the lock; reading names is fine).
void gvls_threads_each(void (*fn)(gvls_thread *, void *), void *arg);
// The same for the slots at index from and after; returns the registry's length. Slots are only
// appended while a trace records (nothing prunes then), so an index is a stable place to go on from.
size_t gvls_threads_each_from(size_t from, void (*fn)(gvls_thread *, void *), void *arg);
// Forgets threads that have exited and whose metrics were retired (or are not being collected).
void gvls_threads_prune_exited(void);
// Defines Native.thread_created_at.
void gvls_thread_state_define(VALUE mNative);
// The EXITED hook's last touch of a slot: marks it exited (release order: a snapshot may read
// and retire it from then on) and queues it for release, then asks for the release job. No
// locks, no allocation.
void gvls_thread_exited(gvls_thread *slot);
// With the GVL, on the main Ractor (elsewhere it does nothing): for each thread queued by its
// EXITED, reads its name (and, while a trace records, its creation site) into the slot, clears
// its thread-specific storage and stops marking its Thread. Calls Ruby; never raises. The
// postponed job runs it soon after EXITED; snapshots, start and stop run it before they prune.
void gvls_threads_release_exited(void);
// Triggers the release job again if exited threads wait for it (from the hook: no locks, no Ruby).
// The trigger at EXITED goes to the dying thread's execution context, where it may wait for the
// next trigger: lookups on the slow path (every native thread's first after an EXITED) and GC
// events call this, from a live thread.
void gvls_threads_release_poke(void);
// While a caller holds Thread VALUEs copied out of the registry across Ruby calls (thread
// records): releases wait (depth counted; with the GVL).
void gvls_threads_release_pause(int paused);
// Whether the caller runs on the main Ractor (where Thread objects of every Ractor are read).
int gvls_on_main_ractor(void);
// Whether Ractor ids are read (this Ruby's layout is in cruby_layout.h and held at Init); else 0.
int gvls_ractor_ids_known(void);
void gvls_thread_state_after_fork(void);
// Forgets threads that are dead (Thread#alive?) though no EXITED was seen. With the GVL. Does
// nothing while a hook may run or a trace's thread table is open (see the two setters above).
void gvls_threads_prune_dead(void);
// Slots in the registry, and those of them that still mark their Thread (tests bound them).
size_t gvls_threads_count(void);
size_t gvls_threads_marked_count(void);
// free(3), or with debug.c's quarantine on, poison (serial 0) and keep.
void gvls_slot_free(gvls_thread *slot);
extern int gvls_debug_quarantine;

// A small id of the native thread running the caller (1, 2, ... in order of first use).
extern __thread __attribute__((tls_model("initial-exec"))) uint32_t gvls_tls_native_serial;
uint32_t gvls_assign_native_serial(void);
static inline uint32_t gvls_native_serial(void) {
    uint32_t serial = gvls_tls_native_serial;
    return __builtin_expect(serial != 0, 1) ? serial : gvls_assign_native_serial();
}

#endif
