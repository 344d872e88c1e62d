// Event loops. A thread with a Fiber scheduler (Falcon, async) runs its requests on fibers, one at
// a time: a fiber that keeps the thread makes every other ready fiber wait, as a thread that holds
// the GVL makes the other threads wait. The GVL hook does not see it (the thread keeps the GVL
// across fiber switches); a Ruby event hook on fiber switches does, with the GVL, on the thread.
//
// The thread's loop is its blocking fiber (the one whose select waits for IO and timers); its
// tasks are its non-blocking fibers. A *turn* begins when the loop gives the thread to a task and
// ends when a task gives it back: the task's own work, and that of the tasks it starts (they run
// at once, inside its turn). A request on a task waited for the loop from when its bytes arrived
// until its turn began (request_timing.c); the turns' lengths are how late the loop comes back
// to its select, as Node.js' event-loop delay.
#include "fibers.h"
#include "clock.h"
#include "metrics.h"
#include "histogram.h"
#include "record_names.h"
#include "stacks.h"
#include "trace_session.h"
#include "trace.h"
#include <ruby/fiber/scheduler.h>
#include <ruby/io.h>
#include <stdlib.h>
#include <string.h>

// Each thread's loop, by its slot's index: fibers.c's, not a field of the slot (the thread state is
// below its consumers). Written by the switch hook on the thread itself, with the GVL; snapshots
// read the counters racily (each field's old or new value on x86-64, as the metrics').
typedef struct {
    uint8_t seen;             // a switch of this thread was seen since tracking began
    uint8_t in_task;          // a task holds the thread (else the loop)
    uint64_t loop_since_ns;   // when the loop last got the thread back
    uint64_t turn_started_ns; // when the loop last gave it to a task (0: not seen)
    uint64_t turn_loop_woke_ns;
    VALUE turn_fiber;         // the task the loop gave the thread to (a key of the fiber table; never read through)
    uint64_t turn_generation; // the trace whose TURN_BEGIN began the turn (0: none): only its TURN_END follows
    VALUE current;            // the fiber that holds the thread, while requests are in progress (R): compared, never read through
    uint64_t turns, busy_ns, longest_turn_ns;
    uint64_t turn_histogram[GVLS_HISTOGRAM_BUCKETS];  // log2 of ns per turn
} loop_state;

static loop_state *loops;
static size_t loops_capa;
static int tracking;

// The slot's entry; NULL if it has none yet and grow is 0, or if there is no memory for it. Grown
// by malloc, not Ruby's allocator: the switch hook must not start a GC.
static loop_state *loop_of(const gvls_thread *slot, int grow) {
    if (RB_LIKELY(slot->index < loops_capa)) return &loops[slot->index];
    if (!grow) return NULL;
    size_t capa = loops_capa ? loops_capa : 64;
    while (capa <= slot->index) capa *= 2;
    loop_state *grown = realloc(loops, capa * sizeof(*grown));
    if (!grown) return NULL;
    memset(grown + loops_capa, 0, (capa - loops_capa) * sizeof(*grown));
    loops = grown;
    loops_capa = capa;
    return &loops[slot->index];
}

// The turns of loops whose threads are gone, together: counters never go back.
static loop_state retired;

// A freed slot's index goes to a new thread, whose loop is not this one: its turns are retired.
static void slot_freed(gvls_thread *slot) {
    loop_state *loop = loop_of(slot, 0);
    if (!loop) return;
    retired.turns += loop->turns;
    retired.busy_ns += loop->busy_ns;
    if (loop->longest_turn_ns > retired.longest_turn_ns) retired.longest_turn_ns = loop->longest_turn_ns;
    for (int b = 0; b < GVLS_HISTOGRAM_BUCKETS; b++) retired.turn_histogram[b] += loop->turn_histogram[b];
    memset(loop, 0, sizeof(*loop));
}

static const gvls_slot_listener slot_listener = { .freed = slot_freed };

// Tables keyed by the fiber VALUE: open addressing, malloc-grown (the switch hook must never run
// Ruby's allocator), their fibers marked (pinned), so an address in one stays its fiber's, never
// reused by a new fiber under an old entry, until the entry goes.
//
// F: fiber serials for a trace's turn records, 1, 2, ... per process (24 bits, as a record's value;
// they wrap after 16M fibers, skipping 0). An entry goes when its fiber is seen ended at the end of
// its turn, or when the table must grow (ended fibers are swept first), or when a new trace starts
// (a trace's serials are its own); the first GC after the trace stops lets the whole table go.
// R: the fibers of requests in progress on loops (a request's own time, below): an entry goes when
// its request finishes, or when the table must grow and its fiber has ended (a request never finished).
typedef struct own_request own_request;
typedef struct {
    VALUE fiber;              // 0: empty
    uint32_t serial;          // F's
    uint8_t site_pending;     // F's: its last turn was long: read where it gave the loop back at its next turn
    own_request *own;         // R's (malloc'd, freed with its entry)
    uint64_t unblocked_ns;    // when another fiber or thread unblocked it (Scheduler#unblock), till its block ends
} fiber_entry;

typedef struct {
    fiber_entry *entries;
    size_t capa, used;        // capa: a power of 2, at most half full
} fiber_table;

static struct {
    fiber_table table;
    uint64_t generation;      // the trace generation the entries belong to
    uint32_t next_serial;
} F;

static fiber_table R;
static VALUE pending_scheduler;  // a scheduler to wrap (below), marked until then

static void mark_table(const fiber_table *t) {
    for (size_t i = 0; i < t->capa; i++) if (t->entries[i].fiber) rb_gc_mark(t->entries[i].fiber);
}

// With no trace running, F is let go here rather than keeping its fibers alive until the next
// trace (the hook uses it only while one records; GC and the hook both hold the GVL).
static void fibers_mark(void *unused) {
    mark_table(&R);
    if (pending_scheduler) rb_gc_mark(pending_scheduler);
    if (!atomic_load_explicit(&gvls_current_trace.active, memory_order_relaxed)) {
        free(F.table.entries);
        F.table.entries = NULL;
        F.table.capa = F.table.used = 0;
        return;
    }
    mark_table(&F.table);
}

static const rb_data_type_t fibers_holder_type = {
    .wrap_struct_name = "gvlscope/fibers",
    .function = { .dmark = fibers_mark },
    .flags = RUBY_TYPED_FREE_IMMEDIATELY,
};

static inline size_t fiber_home(VALUE fiber, size_t capa) {
    uint64_t x = (uint64_t)fiber >> 3;  // VALUEs of objects are 8-aligned
    x ^= x >> 33; x *= UINT64_C(0xff51afd7ed558ccd); x ^= x >> 33;
    return (size_t)x & (capa - 1);
}

static fiber_entry *fiber_find(const fiber_table *t, VALUE fiber) {
    if (!t->capa) return NULL;
    for (size_t i = fiber_home(fiber, t->capa);; i = (i + 1) & (t->capa - 1)) {
        if (t->entries[i].fiber == fiber) return &t->entries[i];
        if (!t->entries[i].fiber) return NULL;
    }
}

// Linear probing's deletion: later entries of the probe run move back into the hole.
static void fiber_remove(fiber_table *t, fiber_entry *entry) {
    size_t hole = (size_t)(entry - t->entries), mask = t->capa - 1;
    free(t->entries[hole].own);
    t->entries[hole] = (fiber_entry){ 0 };
    t->used--;
    for (size_t i = (hole + 1) & mask; t->entries[i].fiber; i = (i + 1) & mask) {
        size_t home = fiber_home(t->entries[i].fiber, t->capa);
        // Movable if its home is not cyclically within (hole, i].
        if ((i > hole && (home <= hole || home > i)) || (i < hole && home <= hole && home > i)) {
            t->entries[hole] = t->entries[i];
            t->entries[i] = (fiber_entry){ 0 };
            hole = i;
        }
    }
}

static void fiber_put(fiber_entry *entries, size_t capa, fiber_entry entry) {
    size_t i = fiber_home(entry.fiber, capa);
    while (entries[i].fiber) i = (i + 1) & (capa - 1);
    entries[i] = entry;
}

// Room for one more: ended fibers swept out, then the table doubled if still half full. 0: no memory.
static int fiber_room(fiber_table *t) {
    if (t->used + 1 <= t->capa / 2) return 1;
    for (size_t i = 0; i < t->capa; i++) {
        // rb_fiber_alive_p reads the fiber's status: no allocation. Restart at i: a removal moves entries back.
        while (t->entries[i].fiber && !RTEST(rb_fiber_alive_p(t->entries[i].fiber))) fiber_remove(t, &t->entries[i]);
    }
    if (t->used + 1 <= t->capa / 2) return 1;
    size_t capa = t->capa ? t->capa * 2 : 256;
    fiber_entry *grown = calloc(capa, sizeof(*grown));
    if (!grown) return 0;
    for (size_t i = 0; i < t->capa; i++) if (t->entries[i].fiber) fiber_put(grown, capa, t->entries[i]);
    // The GC marks the entries: the old table is let go only once the new one is in place (the
    // hook holds the GVL, so no GC runs in between anyway).
    fiber_entry *old = t->entries;
    t->entries = grown;
    t->capa = capa;
    free(old);
    return 1;
}

// The fiber's entry in t, made (empty but for the fiber) if new; NULL if there is no memory for it.
static fiber_entry *fiber_entry_in(fiber_table *t, VALUE fiber) {
    fiber_entry *entry = fiber_find(t, fiber);
    if (entry) return entry;
    if (!fiber_room(t)) return NULL;
    fiber_put(t->entries, t->capa, (fiber_entry){ .fiber = fiber });
    t->used++;
    return fiber_find(t, fiber);
}

// The fiber's entry in F, with a serial if new; NULL if there is no memory for it.
static fiber_entry *fiber_entry_of(VALUE fiber) {
    if (F.generation != gvls_current_trace.generation) {
        if (F.table.capa) memset(F.table.entries, 0, F.table.capa * sizeof(*F.table.entries));
        F.table.used = 0;
        F.generation = gvls_current_trace.generation;
    }
    fiber_entry *entry = fiber_entry_in(&F.table, fiber);
    if (entry && !entry->serial) {
        if (++F.next_serial > GVLS_MAX_THREAD_SERIAL) F.next_serial = 1;
        entry->serial = F.next_serial;
    }
    return entry;
}

// A request's own time (R). A request on a task shares its thread with the loop's other fibers:
// its run, GVL wait, idle and GC are the thread's while its own fiber holds the thread, summed over
// its stretches; while it is suspended (its IO, its sleep, or other fibers' turns) it is idle
// (request_timing.c), never charged with another fiber's run or wait.
struct own_request {
    size_t slot_index;        // its loop's thread: a stale `current` of another loop is never it
    uint8_t in;               // its fiber holds the thread
    uint64_t in_ns, out_ns;   // when it last got the thread, and last gave it away
    uint64_t since[GVLS_COUNTERS_NOW];  // the thread's counters when it last got the thread
    uint64_t sums[GVLS_COUNTERS_NOW];   // its stretches' so far
    // Ready but suspended (the scheduler's waits, wrapped below): the loop's other fibers ran, and
    // the thread waited for the GVL meanwhile (wait_ready_ns, the GVL wait's part).
    uint64_t loop_wait_ns, wait_ready_ns;
    uint64_t ready_told_ns;   // the in_ns whose readiness was counted: a wait inside a wait (async's sleep is a block) counts once
};

static void own_in(own_request *own, const uint64_t counters[GVLS_COUNTERS_NOW], uint64_t now_ns) {
    memcpy(own->since, counters, sizeof(own->since));
    own->in = 1;
    own->in_ns = now_ns;
}

static void own_out(own_request *own, const uint64_t counters[GVLS_COUNTERS_NOW], uint64_t now_ns) {
    for (int i = 0; i < GVLS_COUNTERS_NOW; i++) own->sums[i] += counters[i] > own->since[i] ? counters[i] - own->since[i] : 0;
    own->in = 0;
    own->out_ns = now_ns;
}

uint64_t gvls_fibers_arrival_ns(uint64_t data_ns, uint64_t loop_woke_ns) {
    int woken_by_them = loop_woke_ns && loop_woke_ns + GVLS_KERNEL_SLACK_NS >= data_ns && loop_woke_ns <= data_ns + GVLS_KERNEL_SLACK_NS;
    return woken_by_them ? loop_woke_ns : data_ns + GVLS_KERNEL_SLACK_NS;
}

// The calling request fiber's wait in its scheduler, called at called_ns, just ended (it holds the
// thread again): it was ready from ready_ns (0: not known), so until its stretch began it waited
// for the loop's other fibers, and for the GVL while its thread did. Nothing for a wait that never
// gave the thread away (its IO was ready at once).
static void own_ready_since(uint64_t ready_ns, uint64_t called_ns) {
    fiber_entry *entry = ready_ns ? fiber_find(&R, rb_fiber_current()) : NULL;
    gvls_thread *slot = entry ? gvls_thread_find_fast(rb_thread_current()) : NULL;
    if (!slot || entry->own->slot_index != slot->index) return;
    own_request *own = entry->own;
    if (!own->in || own->in_ns <= called_ns || own->ready_told_ns == own->in_ns) return;
    own->ready_told_ns = own->in_ns;
    if (ready_ns < own->out_ns) ready_ns = own->out_ns;  // ready as it gave the thread away: a yield
    if (ready_ns >= own->in_ns) return;
    uint64_t now_ns = gvls_now_ns();
    // Each a lower bound when the thread's wait log holds fewer waits than came: never below 0.
    uint64_t since_ready_ns = gvls_metrics_own_wait_since(slot, ready_ns, now_ns, NULL, NULL);
    uint64_t since_in_ns = gvls_metrics_own_wait_since(slot, own->in_ns, now_ns, NULL, NULL);
    uint64_t waited_ns = since_ready_ns > since_in_ns ? since_ready_ns - since_in_ns : 0;
    uint64_t ready_for_ns = own->in_ns - ready_ns;
    if (waited_ns > ready_for_ns) waited_ns = ready_for_ns;
    own->wait_ready_ns += waited_ns;
    own->loop_wait_ns += ready_for_ns - waited_ns;
}

// A request's waits in its scheduler, prepended to the scheduler's class (Fiber::Scheduler's
// required hooks, arguments passed through as given): when each ended, in the request's fiber,
// it tells when that fiber became ready. IO: a TCP socket's bytes, by the kernel (as a request's
// arrival); a sleep: its end; a block: its unblock (or its timeout). Other waits (a pipe, a
// writable socket) have no known readiness: their time stays idle.
static VALUE mWaits, mReads;
static VALUE wrapped_class;  // the scheduler class last wrapped (compared only)

static int fd_of(VALUE io) {
    if (!RB_TYPE_P(io, T_FILE)) return -1;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    return RFILE(io)->fptr ? RFILE(io)->fptr->fd : -1;  // a closed IO: -1 (rb_io_descriptor would raise)
#pragma GCC diagnostic pop
}

static int recording_turns(void) {
    return tracking && atomic_load_explicit(&gvls_current_trace.active, memory_order_acquire);
}

// A trace records turns: the turn in progress is the calling fiber's, begun after its wait was
// called (it gave the thread away meanwhile), ready since ready_ns: TURN_READY, how long in us.
static void trace_ready_since(uint64_t ready_ns, uint64_t called_ns) {
    gvls_thread *slot = recording_turns() ? gvls_thread_find_fast(rb_thread_current()) : NULL;
    loop_state *loop = slot ? loop_of(slot, 0) : NULL;
    if (!loop || !loop->in_task || loop->turn_generation != gvls_current_trace.generation ||
        loop->turn_fiber != rb_fiber_current() || loop->turn_started_ns <= called_ns) return;
    if (ready_ns < called_ns) ready_ns = called_ns;
    if (ready_ns >= loop->turn_started_ns) return;
    uint64_t us = (loop->turn_started_ns - ready_ns) / 1000;
    if (!us) return;
    uint64_t now_ns = gvls_now_ns();
    gvls_trace_record(GVLS_EV_TURN_READY, slot->serial, now_ns);
    gvls_trace_record(GVLS_EV_ARG, us < GVLS_MAX_THREAD_SERIAL ? (uint32_t)us : GVLS_MAX_THREAD_SERIAL, now_ns);
}

static void ready_since(uint64_t ready_ns, uint64_t called_ns) {
    if (!ready_ns) return;
    own_ready_since(ready_ns, called_ns);
    trace_ready_since(ready_ns, called_ns);
}

// Whether the calling fiber's waits are followed: a request's (R), or any task's while a trace
// records turns; 0 otherwise (the common case: a load or two).
static int follows_waits(void) {
    return (R.used && fiber_find(&R, rb_fiber_current()) != NULL) || recording_turns();
}

// The fiber's entries that hold its unblock: R's and, while a trace records turns, F's.
static fiber_entry *unblock_entry(VALUE fiber) {
    fiber_entry *entry = R.used ? fiber_find(&R, fiber) : NULL;
    if (!entry && recording_turns() && F.generation == gvls_current_trace.generation) entry = fiber_find(&F.table, fiber);
    return entry;
}

static uint64_t duration_end_ns(VALUE duration, uint64_t from_ns) {
    double seconds = FIXNUM_P(duration) ? (double)FIX2LONG(duration) : RB_FLOAT_TYPE_P(duration) ? RFLOAT_VALUE(duration) : -1;
    return seconds >= 0 && seconds < 1e9 ? from_ns + (uint64_t)(seconds * 1e9) : 0;  // NaN fails both
}

// After a wait for fd to be readable, called at called_ns: ready when its bytes came.
static void own_read_ready(int fd, uint64_t called_ns) {
    uint64_t now_ns = gvls_now_ns(), data_ns = gvls_kernel_data_arrival_ns(fd, now_ns);
    gvls_thread *slot = data_ns ? gvls_thread_find_fast(rb_thread_current()) : NULL;
    if (slot) ready_since(gvls_fibers_arrival_ns(data_ns, slot->metrics.woke_ns), called_ns);
}

static VALUE waits_io_wait(int argc, VALUE *argv, VALUE self) {
    int fd = follows_waits() && argc >= 2 && FIXNUM_P(argv[1]) && (FIX2LONG(argv[1]) & RUBY_IO_READABLE) ? fd_of(argv[0]) : -1;
    uint64_t called_ns = fd >= 0 ? gvls_now_ns() : 0;
    VALUE result = rb_call_super_kw(argc, argv, RB_PASS_CALLED_KEYWORDS);
    if (fd >= 0) own_read_ready(fd, called_ns);
    return result;
}

// Scheduler#io_read (async's, Ruby >= 3.3.1: reads of a non-blocking IO go there, not io_wait):
// prepended only to a scheduler that has it (CRuby asks whether it responds).
static VALUE reads_io_read(int argc, VALUE *argv, VALUE self) {
    int fd = follows_waits() && argc >= 1 ? fd_of(argv[0]) : -1;
    uint64_t called_ns = fd >= 0 ? gvls_now_ns() : 0;
    VALUE result = rb_call_super_kw(argc, argv, RB_PASS_CALLED_KEYWORDS);
    if (fd >= 0) own_read_ready(fd, called_ns);
    return result;
}

static VALUE waits_kernel_sleep(int argc, VALUE *argv, VALUE self) {
    uint64_t called_ns = follows_waits() ? gvls_now_ns() : 0;
    uint64_t due_ns = called_ns && argc >= 1 ? duration_end_ns(argv[0], called_ns) : 0;
    VALUE result = rb_call_super_kw(argc, argv, RB_PASS_CALLED_KEYWORDS);
    ready_since(due_ns, called_ns);
    return result;
}

static VALUE waits_block(int argc, VALUE *argv, VALUE self) {
    int follows = follows_waits();
    uint64_t called_ns = follows ? gvls_now_ns() : 0;
    uint64_t due_ns = follows && argc >= 2 && !NIL_P(argv[1]) ? duration_end_ns(argv[1], called_ns) : 0;
    VALUE result = rb_call_super_kw(argc, argv, RB_PASS_CALLED_KEYWORDS);
    if (follows) {
        fiber_entry *entry = unblock_entry(rb_fiber_current());
        uint64_t unblocked_ns = entry ? entry->unblocked_ns : 0;
        if (entry) entry->unblocked_ns = 0;
        ready_since(unblocked_ns && (!due_ns || unblocked_ns < due_ns) ? unblocked_ns : due_ns, called_ns);
    }
    return result;
}

// From the fiber or thread that unblocks: the blocked fiber is ready now.
static VALUE waits_unblock(int argc, VALUE *argv, VALUE self) {
    fiber_entry *entry = argc >= 2 ? unblock_entry(argv[1]) : NULL;
    if (entry) entry->unblocked_ns = gvls_now_ns();
    return rb_call_super_kw(argc, argv, RB_PASS_CALLED_KEYWORDS);
}

// A trace records turns: a loop whose scheduler is not wrapped yet gets wrapped by a postponed
// job (the switch hook makes no Ruby objects), its scheduler kept (marked) until then.
static rb_postponed_job_handle_t wrap_job = POSTPONED_JOB_HANDLE_INVALID;

static void wrap_waits(VALUE scheduler) {
    if (NIL_P(scheduler)) return;
    VALUE klass = rb_obj_class(scheduler);
    if (klass == wrapped_class) return;
    if (!RTEST(rb_class_inherited_p(klass, mWaits))) {
        if (rb_method_boundp(klass, rb_intern("io_read"), 0)) rb_prepend_module(klass, mReads);
        rb_prepend_module(klass, mWaits);
    }
    wrapped_class = klass;
}

static void wrap_pending(void *unused) {
    VALUE scheduler = pending_scheduler;
    pending_scheduler = 0;
    if (scheduler) wrap_waits(scheduler);
}

// Every switch of a loop's thread while requests are in progress, task to task too (a task that
// starts another runs it at once, inside its turn: Falcon's connection tasks, started by its
// acceptor's): the fiber that had the thread and the one that has it now.
static void own_switched(const gvls_thread *slot, loop_state *loop) {
    VALUE now_fiber = rb_fiber_current();
    VALUE before = loop->current;
    loop->current = now_fiber;
    if (before == now_fiber) return;
    fiber_entry *out = before ? fiber_find(&R, before) : NULL;
    fiber_entry *in = fiber_find(&R, now_fiber);
    int leaving = out && out->own->in && out->own->slot_index == slot->index;
    int coming = in && !in->own->in && in->own->slot_index == slot->index;
    if (!leaving && !coming) return;
    uint64_t counters[GVLS_COUNTERS_NOW], now_ns = gvls_now_ns();
    gvls_metrics_counters_now(slot, now_ns, counters, NULL);
    if (leaving) own_out(out->own, counters, now_ns);
    if (coming) own_in(in->own, counters, now_ns);
}

int gvls_fibers_own_start(const gvls_thread *slot, const uint64_t counters[GVLS_COUNTERS_NOW]) {
    loop_state *loop = tracking ? loop_of(slot, 1) : NULL;
    if (!loop) return 0;
    VALUE fiber = rb_fiber_current();
    fiber_entry *entry = fiber_entry_in(&R, fiber);
    if (!entry) return 0;
    if (!entry->own && !(entry->own = malloc(sizeof(own_request)))) {
        fiber_remove(&R, entry);
        return 0;
    }
    *entry->own = (own_request){ .slot_index = slot->index };
    own_in(entry->own, counters, gvls_now_ns());
    loop->current = fiber;
    wrap_waits(rb_fiber_scheduler_current());
    return 1;
}

int gvls_fibers_own_counters(VALUE fiber, const gvls_thread *slot, uint64_t now_ns, uint64_t out[GVLS_COUNTERS_NOW],
                             uint64_t *loop_wait_ns) {
    fiber_entry *entry = slot ? fiber_find(&R, fiber) : NULL;
    if (!entry || entry->own->slot_index != slot->index) return 0;
    memcpy(out, entry->own->sums, sizeof(entry->own->sums));
    out[GVLS_NOW_WAIT] += entry->own->wait_ready_ns;
    *loop_wait_ns = entry->own->loop_wait_ns;
    if (entry->own->in) {
        uint64_t counters[GVLS_COUNTERS_NOW];
        gvls_metrics_counters_now(slot, now_ns, counters, NULL);
        for (int i = 0; i < GVLS_COUNTERS_NOW; i++) out[i] += counters[i] > entry->own->since[i] ? counters[i] - entry->own->since[i] : 0;
    }
    return 1;
}

void gvls_fibers_own_stop(VALUE fiber) {
    fiber_entry *entry = fiber_find(&R, fiber);
    if (entry) fiber_remove(&R, entry);
}

// A trace records: the turn's records in the thread's lane (trace.h's fast path: no lock unless
// a chunk fills). A fiber with no serial (no memory) still gets its TURN_BEGIN, with serial 0.
static void record_turn_begin(const gvls_thread *slot, VALUE fiber, uint64_t now_ns) {
    fiber_entry *entry = fiber_entry_of(fiber);
    gvls_trace_record(GVLS_EV_TURN_BEGIN, slot->serial, now_ns);
    gvls_trace_record(GVLS_EV_ARG, entry ? entry->serial : 0, now_ns);
    if (!entry || !entry->site_pending) return;
    entry->site_pending = 0;
    // Back in the fiber that kept the loop: its frames are where it gave the loop back.
    uint32_t stack = gvls_stacks_capture_site();
    if (!stack) return;
    gvls_trace_record(GVLS_EV_TURN_SITE, slot->serial, now_ns);
    gvls_trace_record(GVLS_EV_ARG, stack, now_ns);
}

static void record_turn_end(const gvls_thread *slot, VALUE fiber, uint64_t turn_ns, uint64_t now_ns) {
    gvls_trace_record(GVLS_EV_TURN_END, slot->serial, now_ns);
    fiber_entry *entry = F.generation == gvls_current_trace.generation ? fiber_find(&F.table, fiber) : NULL;
    if (!entry) return;
    if (!RTEST(rb_fiber_alive_p(fiber))) fiber_remove(&F.table, entry);  // it ended: its address may be a new fiber's
    else if (turn_ns >= GVLS_LONG_TURN_NS && atomic_load_explicit(&gvls_stacks.on, memory_order_relaxed)) entry->site_pending = 1;
}

// RUBY_EVENT_FIBER_SWITCH, in the fiber switched to (cont.c fires it after the thread's blocking
// count follows the new fiber: rb_fiber_scheduler_current is nil in the loop, the scheduler in a task).
static void fiber_switched(VALUE data, rb_trace_arg_t *arg) {
    (void)data; (void)arg;
    VALUE scheduler = rb_fiber_scheduler_get();
    if (NIL_P(scheduler)) return;  // no loop: an Enumerator's fiber, a plain Fiber
    int task = !NIL_P(rb_fiber_scheduler_current());
    gvls_thread *slot = gvls_thread_for(rb_thread_current());
    loop_state *loop = slot ? loop_of(slot, 1) : NULL;
    if (!loop) return;
    if (R.used) own_switched(slot, loop);
    if (loop->seen && task == loop->in_task) return;  // task to task (one starting another), loop to loop
    uint64_t now_ns = gvls_now_ns();
    // Acquire: pairs with the start's store, so the lane generation read next is the new one (trace.h).
    int recording = atomic_load_explicit(&gvls_current_trace.active, memory_order_acquire);
    if (task) {
        loop->turn_started_ns = now_ns;
        loop->turn_generation = recording ? gvls_current_trace.generation : 0;
        if (recording) {
            // A task is running: rb_fiber_current reads its fiber (only a thread's root fiber is made lazily).
            loop->turn_fiber = rb_fiber_current();
            record_turn_begin(slot, loop->turn_fiber, now_ns);
            if (RB_UNLIKELY(rb_obj_class(scheduler) != wrapped_class) && !pending_scheduler) {
                pending_scheduler = scheduler;
                rb_postponed_job_trigger(wrap_job);
            }
        }
        // The loop's select returned after it last got the thread: IO or a timer woke it. Read from
        // the metrics (the GVL hook's, on this thread: nothing writes them meanwhile).
        uint64_t woke_ns = slot->metrics.woke_ns;
        loop->turn_loop_woke_ns = loop->seen && woke_ns > loop->loop_since_ns ? woke_ns : 0;
    } else {
        if (loop->seen && loop->turn_started_ns) {
            uint64_t turn_ns = now_ns > loop->turn_started_ns ? now_ns - loop->turn_started_ns : 0;
            if (recording && loop->turn_generation == gvls_current_trace.generation) {
                record_turn_end(slot, loop->turn_fiber, turn_ns, now_ns);
            }
            loop->turns++;
            loop->busy_ns += turn_ns;
            if (turn_ns > loop->longest_turn_ns) loop->longest_turn_ns = turn_ns;
            unsigned bucket = gvls_log2_bucket(turn_ns);
            loop->turn_histogram[bucket < GVLS_HISTOGRAM_BUCKETS ? bucket : GVLS_HISTOGRAM_BUCKETS - 1]++;
        }
        loop->loop_since_ns = now_ns;
    }
    loop->in_task = (uint8_t)task;
    loop->seen = 1;
    slot->loop_task_turn = task;
}

static void clear_task_turn(gvls_thread *slot, void *unused) {
    slot->loop_task_turn = 0;
}

static void set_tracking(int on) {
    if (on == tracking) return;
    if (on) rb_add_event_hook2((rb_event_hook_func_t)fiber_switched, RUBY_EVENT_FIBER_SWITCH, Qnil,
                               RUBY_EVENT_HOOK_FLAG_SAFE | RUBY_EVENT_HOOK_FLAG_RAW_ARG);
    else rb_remove_event_hook((rb_event_hook_func_t)fiber_switched);
    // What was seen before is not continued: a turn in progress while off is unknown.
    for (size_t i = 0; i < loops_capa; i++) loops[i].seen = 0;
    if (!on) gvls_threads_each(clear_task_turn, NULL);  // the GVL hook reads the flags, not `tracking`
    tracking = on;
    gvls_stacks_loop_turns(on ? gvls_fibers_in_task_turn : NULL);  // a task's blocking call gets its release site
}

int gvls_fibers_requests;

int gvls_fibers_on_task(void) {
    if (RB_LIKELY(!gvls_fibers_requests) || NIL_P(rb_fiber_scheduler_current())) return 0;
    if (!tracking) set_tracking(1);
    return 1;
}

int gvls_fibers_turn(const gvls_thread *slot, gvls_loop_turn *out) {
    const loop_state *loop = tracking ? loop_of(slot, 0) : NULL;
    if (!loop || !loop->seen || !loop->in_task || !loop->turn_started_ns) return 0;
    *out = (gvls_loop_turn){ .started_ns = loop->turn_started_ns, .loop_woke_ns = loop->turn_loop_woke_ns };
    return 1;
}

static VALUE key_protocol_request;  // "protocol.http.request"
static ID id_connection, id_stream, id_io;

// recv.name, if it answers to it (Qundef otherwise); these are attribute readers in
// async-http and io-stream, which do not raise.
static VALUE reader(VALUE recv, ID name) {
    return NIL_P(recv) || recv == Qundef ? Qundef : rb_check_funcall(recv, name, 0, NULL);
}

int gvls_fibers_fd_of_env(VALUE env) {
    if (!RB_TYPE_P(env, T_HASH)) return -1;
    VALUE request = rb_hash_lookup2(env, key_protocol_request, Qnil);
    VALUE io = reader(reader(reader(request, id_connection), id_stream), id_io);
    // Only a real IO (an SSL socket has no descriptor whose bytes are the request's).
    if (io == Qundef || !RB_TYPE_P(io, T_FILE)) return -1;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    return RFILE(io)->fptr ? RFILE(io)->fptr->fd : -1;  // a closed IO: -1 (rb_io_descriptor would raise)
#pragma GCC diagnostic pop
}

// Native.loop_tracking = on: the switch hook (GVLScope::Rack turns it on at its first request on a task).
static VALUE native_set_tracking(VALUE self, VALUE on) {
    set_tracking(RTEST(on));
    return on;
}

static VALUE native_tracking_p(VALUE self) { return tracking ? Qtrue : Qfalse; }

// Native.loop_requests = on: GVLScope::Rack looks for an event loop at each request (an Async
// server's process: Falcon); elsewhere a request pays one load for it.
static VALUE native_set_requests(VALUE self, VALUE on) {
    gvls_fibers_requests = RTEST(on);
    return on;
}

static VALUE native_requests_p(VALUE self) { return gvls_fibers_requests ? Qtrue : Qfalse; }

// Copies of the loops with turns, under the registry lock (no Ruby objects made there: a GC's
// mark takes that lock), then made rows.
typedef struct { uint32_t serial; loop_state loop; } loop_row;
typedef struct { loop_row *rows; size_t count, capa; } loop_rows;

static void copy_row(gvls_thread *slot, void *arg) {
    loop_rows *out = arg;
    const loop_state *loop = loop_of(slot, 0);
    if (!loop || !loop->turns || out->count == out->capa) return;
    out->rows[out->count++] = (loop_row){ .serial = slot->serial, .loop = *loop };
}

// The loops that gave turns while tracking was on, by thread serial (0: those of exited threads);
// the caller frees .rows.
static loop_rows copy_loops(void) {
    loop_rows copied = { .capa = gvls_threads_count() + 1 };
    copied.rows = malloc(copied.capa * sizeof(loop_row));
    if (!copied.rows) rb_raise(rb_eNoMemError, "gvlscope loop turns");
    gvls_threads_each(copy_row, &copied);
    if (retired.turns && copied.count < copied.capa) copied.rows[copied.count++] = (loop_row){ .serial = 0, .loop = retired };
    return copied;
}

// One row as fibers.h's GVLS_LOOP_ROW says, GVLS_LOOP_ROW_FIELDS uint64.
static void pack_loop_row(const loop_row *row, uint64_t *out) {
#define LOOP_ROW_VALUE(name, index, value) out[GVLS_LOOP_ROW_##index] = (value);
    GVLS_LOOP_ROW(LOOP_ROW_VALUE)
    memcpy(out + GVLS_LOOP_ROW_HISTOGRAM, row->loop.turn_histogram, sizeof(row->loop.turn_histogram));
}

// Native.loop_turns -> [[*Native::LOOP_ROW's numbers, turn_histogram (log2 ns buckets)], ...] for the
// threads whose loop gave turns while tracking was on; serial 0: those of exited threads.
static VALUE native_loop_turns(VALUE self) {
    loop_rows copied = copy_loops();
    VALUE rows = rb_ary_new_capa((long)copied.count);
    for (size_t i = 0; i < copied.count; i++) {
        uint64_t packed[GVLS_LOOP_ROW_FIELDS];
        pack_loop_row(&copied.rows[i], packed);
        VALUE row = rb_ary_new_capa(GVLS_LOOP_ROW_HISTOGRAM + 1), histogram = rb_ary_new_capa(GVLS_HISTOGRAM_BUCKETS);
        for (int f = 0; f < GVLS_LOOP_ROW_HISTOGRAM; f++) rb_ary_push(row, ULL2NUM(packed[f]));
        for (int b = 0; b < GVLS_HISTOGRAM_BUCKETS; b++) rb_ary_push(histogram, ULL2NUM(packed[GVLS_LOOP_ROW_HISTOGRAM + b]));
        rb_ary_push(row, histogram);
        rb_ary_push(rows, row);
    }
    free(copied.rows);
    return rows;
}

static int by_serial(const void *a, const void *b) {
    uint32_t x = ((const loop_row *)a)->serial, y = ((const loop_row *)b)->serial;
    return (x > y) - (x < y);
}

// Native.loop_rows -> the rows of Native.loop_turns packed as GVLS_LOOP_ROW_FIELDS little-endian
// uint64 each (GVLS_LOOP_ROW, then the histogram), sorted by serial: the live
// answer writes each thread's from them (live_answer.c) without a Ruby object per loop.
static VALUE native_loop_rows(VALUE self) {
    loop_rows copied = copy_loops();
    qsort(copied.rows, copied.count, sizeof(loop_row), by_serial);
    VALUE packed = rb_str_new(NULL, (long)(copied.count * GVLS_LOOP_ROW_FIELDS * sizeof(uint64_t)));
    uint64_t *out = (uint64_t *)RSTRING_PTR(packed);
    for (size_t i = 0; i < copied.count; i++, out += GVLS_LOOP_ROW_FIELDS) pack_loop_row(&copied.rows[i], out);
    free(copied.rows);
    return packed;
}

// Native.loop_turns_reset: the loops' counters start again from zero (Metrics.reset), the turns in
// progress go on.
static VALUE native_loop_turns_reset(VALUE self) {
    for (size_t i = 0; i < loops_capa; i++) {
        loops[i].turns = loops[i].busy_ns = loops[i].longest_turn_ns = 0;
        memset(loops[i].turn_histogram, 0, sizeof(loops[i].turn_histogram));
    }
    memset(&retired, 0, sizeof(retired));
    return Qnil;
}

// A long turn's code. A loop's thread never waits for the GVL while its task burns CPU, so the
// SWITCH sampler (which runs while a thread waits) never samples it: at each CPU sample of a file
// trace with stacks, the drain thread asks for a postponed job, which runs on the thread holding
// the GVL and samples its stack if it is a task in a turn of GVLS_LONG_TURN_NS or more (its frames
// are then the turn's code: a route's CPU-bound work, not where its fiber later gave the loop back).
static rb_postponed_job_handle_t turn_sample_job = POSTPONED_JOB_HANDLE_INVALID;

static void turn_sample_run(void *unused) {
    if (!tracking) return;
    gvls_thread *slot = gvls_thread_find_fast(rb_thread_current());
    const loop_state *loop = slot ? loop_of(slot, 0) : NULL;
    if (!loop || !loop->seen || !loop->in_task || !loop->turn_started_ns) return;
    if (gvls_now_ns() - loop->turn_started_ns < GVLS_LONG_TURN_NS) return;
    gvls_stacks_sample_running();
}

// On the drain thread: rb_postponed_job_trigger may be called from any thread.
static void tick(void) {
    if (tracking && atomic_load_explicit(&gvls_stacks.on, memory_order_relaxed)) rb_postponed_job_trigger(turn_sample_job);
}

void gvls_fibers_init(VALUE mNative) {
    turn_sample_job = rb_postponed_job_preregister(0, turn_sample_run, NULL);
    wrap_job = rb_postponed_job_preregister(0, wrap_pending, NULL);
    gvls_session_on_tick(tick);
    // A non-NULL data pointer: CRuby skips the mark function of a T_DATA whose pointer is NULL.
    rb_gc_register_mark_object(TypedData_Wrap_Struct(0, &fibers_holder_type, &F));
    gvls_threads_listen(&slot_listener);
    key_protocol_request = rb_obj_freeze(rb_usascii_str_new_cstr("protocol.http.request"));
    rb_gc_register_mark_object(key_protocol_request);
    id_connection = rb_intern("connection");
    id_stream = rb_intern("stream");
    id_io = rb_intern("io");
    mWaits = rb_define_module_under(mNative, "LoopWaits");
    rb_define_method(mWaits, "io_wait", waits_io_wait, -1);
    rb_define_method(mWaits, "kernel_sleep", waits_kernel_sleep, -1);
    rb_define_method(mWaits, "block", waits_block, -1);
    rb_define_method(mWaits, "unblock", waits_unblock, -1);
    mReads = rb_define_module_under(mNative, "LoopReads");
    rb_define_method(mReads, "io_read", reads_io_read, -1);
    rb_define_singleton_method(mNative, "loop_tracking=", native_set_tracking, 1);
    rb_define_singleton_method(mNative, "loop_tracking?", native_tracking_p, 0);
    rb_define_singleton_method(mNative, "loop_requests=", native_set_requests, 1);
    rb_define_singleton_method(mNative, "loop_requests?", native_requests_p, 0);
    rb_define_singleton_method(mNative, "loop_turns", native_loop_turns, 0);
    rb_define_singleton_method(mNative, "loop_turns_reset", native_loop_turns_reset, 0);
    rb_define_singleton_method(mNative, "loop_rows", native_loop_rows, 0);
#define LOOP_ROW_NAME(name, index, value) #name,
    static const char *const loop_row_names[] = { GVLS_LOOP_ROW(LOOP_ROW_NAME) "turn_histogram" };
    rb_define_const(mNative, "LOOP_ROW", gvls_symbols(loop_row_names, sizeof(loop_row_names) / sizeof(*loop_row_names)));
}

// In the GVL hook, at the slot's own SUSPENDED (it still holds the GVL; fiber_switched writes the
// loop on this same thread): whether a task holds its loop's turn, begun in the trace now recording.
// A blocking call there stalls the whole loop: its release site is worth reading (stacks.c). Reads
// only: no allocation, no lock.
int gvls_fibers_in_task_turn(const gvls_thread *slot) {
    const loop_state *loop = loop_of(slot, 0);
    return loop && loop->seen && loop->in_task && loop->turn_started_ns &&
           loop->turn_generation && loop->turn_generation == gvls_current_trace.generation;
}
