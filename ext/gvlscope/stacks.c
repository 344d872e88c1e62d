// Code locations: see stacks.h. Two interning tables, both append-only during a trace:
// locations (a frame VALUE and the line executing in it) and stacks (a list of location ids).
// Entries are written before the count that publishes them, so the GC's mark, a flight recorder
// dump and the writer read a consistent prefix while other Ractors may still append.
#include "stacks.h"
#include "format.h"
#include "trace_framing.h"
#include "clock.h"
#include <errno.h>
#include <stdlib.h>

#define SITE_DEPTH 8          // a release site: the blocking method and a few callers
#define SAMPLE_DEPTH 32       // a holder sample: deep enough for a profile (rare: <= ~100 Hz)
#define MAX_LOCATIONS 16384   // ids fit in uint16 in the stack pool
#define MAX_STACKS 16384
#define POOL_SIZE (MAX_STACKS * 16)
#define TABLE_SLOTS 32768     // open addressing, at most half full

typedef struct { VALUE frame; int32_t line; } location;
typedef struct { uint32_t hash, offset; uint32_t depth; } stack_entry;

gvls_stacks_state gvls_stacks;

static struct {
    location *locations;          // [1..location_count]
    uint32_t *location_slots;     // TABLE_SLOTS ids, 0 = empty
    stack_entry *stacks;          // [1..stack_count]
    uint32_t *stack_slots;
    uint16_t *pool;
    uint32_t pool_used;
    _Atomic uint32_t location_count, stack_count;
    atomic_flag busy;             // one interner at a time: only Ractors other than the GVL holder's contend
    _Atomic uint64_t sites, samples, dropped, unreadable;
} S = { .busy = ATOMIC_FLAG_INIT };

// fibers.c's query while it tracks loops, else NULL.
static int (*_Atomic in_loop_turn)(const gvls_thread *slot);

static VALUE switch_tracepoint = Qnil;
static int tracepoint_enabled;  // with the GVL: the sampler's tracepoint, apart from `on`
static VALUE holder = Qnil;

// Interned frames must outlive their methods (a redefined method's entry, an unloaded iseq) until
// they are resolved at stop: marked (and pinned, so the VALUEs stay valid under compaction).
static void stacks_mark(void *unused) {
    uint32_t count = atomic_load_explicit(&S.location_count, memory_order_acquire);
    for (uint32_t id = 1; id <= count; id++) rb_gc_mark(S.locations[id].frame);
}

static const rb_data_type_t holder_type = {
    .wrap_struct_name = "gvlscope/stacks",
    .function = { .dmark = stacks_mark },
    .flags = RUBY_TYPED_FREE_IMMEDIATELY,
};

static inline uint32_t mix(uint64_t x) {
    x ^= x >> 33; x *= UINT64_C(0xff51afd7ed558ccd); x ^= x >> 33;
    return (uint32_t)x;
}

static uint32_t intern_location(VALUE frame, int line) {
    uint32_t h = mix((uint64_t)frame ^ ((uint64_t)(uint32_t)line << 48));
    for (uint32_t i = h & (TABLE_SLOTS - 1);; i = (i + 1) & (TABLE_SLOTS - 1)) {
        uint32_t id = S.location_slots[i];
        if (!id) {
            uint32_t count = atomic_load_explicit(&S.location_count, memory_order_relaxed);
            if (count >= MAX_LOCATIONS) return 0;
            S.locations[count + 1] = (location){ frame, line };
            atomic_store_explicit(&S.location_count, count + 1, memory_order_release);  // after the entry: mark reads up to it
            return S.location_slots[i] = count + 1;
        }
        if (S.locations[id].frame == frame && S.locations[id].line == line) return id;
    }
}

static uint32_t intern_stack(const uint32_t *ids, int depth) {
    uint64_t acc = (uint64_t)depth;
    for (int i = 0; i < depth; i++) acc = acc * 31 + ids[i];
    uint32_t h = mix(acc);
    for (uint32_t i = h & (TABLE_SLOTS - 1);; i = (i + 1) & (TABLE_SLOTS - 1)) {
        uint32_t id = S.stack_slots[i];
        if (!id) {
            uint32_t count = atomic_load_explicit(&S.stack_count, memory_order_relaxed);
            if (count >= MAX_STACKS || S.pool_used + (uint32_t)depth > POOL_SIZE) return 0;
            for (int k = 0; k < depth; k++) S.pool[S.pool_used + k] = (uint16_t)ids[k];
            S.stacks[count + 1] = (stack_entry){ h, S.pool_used, (uint32_t)depth };
            S.pool_used += (uint32_t)depth;
            atomic_store_explicit(&S.stack_count, count + 1, memory_order_release);
            return S.stack_slots[i] = count + 1;
        }
        const stack_entry *entry = &S.stacks[id];
        if (entry->hash != h || entry->depth != (uint32_t)depth) continue;
        int same = 1;
        for (int k = 0; k < depth && same; k++) same = S.pool[entry->offset + k] == ids[k];
        if (same) return id;
    }
}

// The calling thread's own frames (rb_profile_frames reads the current execution context: the
// caller holds its Ractor's GVL, at its own SUSPENDED or in a tracepoint). 0: none, or dropped.
static uint32_t capture(int depth) {
    VALUE frames[SAMPLE_DEPTH];
    int lines[SAMPLE_DEPTH];
    // start must be 0: 3.3's thread_profile_frames loops forever on a start > 0 (it skips without
    // moving to the next frame).
    int n = rb_profile_frames(0, depth, frames, lines);
    if (n <= 0) return 0;  // a dying thread: its VM stack is gone (cfp NULL)
    if (atomic_flag_test_and_set_explicit(&S.busy, memory_order_acquire)) {
        // Another Ractor interns right now: never wait in the hook.
        atomic_fetch_add_explicit(&S.dropped, 1, memory_order_relaxed);
        return 0;
    }
    uint32_t ids[SAMPLE_DEPTH];
    uint32_t stack = 0;
    int i;
    for (i = 0; i < n && (ids[i] = intern_location(frames[i], lines[i])); i++) {}
    if (i == n) stack = intern_stack(ids, n);
    atomic_flag_clear_explicit(&S.busy, memory_order_release);
    if (!stack) atomic_fetch_add_explicit(&S.dropped, 1, memory_order_relaxed);
    return stack;
}

void gvls_stacks_loop_turns(int (*in_task_turn)(const gvls_thread *slot)) {
    atomic_store(&in_loop_turn, in_task_turn);
}

void gvls_stacks_record_site(gvls_thread *slot, uint64_t now_ns) {
    // The two reads may straddle a change of tracking: then one release's site is read or not.
    int (*in_task_turn)(const gvls_thread *) = atomic_load_explicit(&in_loop_turn, memory_order_relaxed);
    int64_t waiters = atomic_load_explicit(&gvls_stacks.waiting, memory_order_relaxed);
    // Nobody waits for the GVL: only a release inside a task's turn stalls anyone (its whole loop).
    if (waiters <= 0 && !(in_task_turn && in_task_turn(slot))) return;
    // Only the subject's own frames: the hook's native thread must be running the subject (M:N
    // could differ); never another thread's stack.
    if (!ruby_native_thread_p() || rb_thread_current() != slot->thread) {
        atomic_fetch_add_explicit(&S.unreadable, 1, memory_order_relaxed);
        return;
    }
    uint32_t stack = capture(SITE_DEPTH);
    if (!stack) return;
    atomic_fetch_add_explicit(&S.sites, 1, memory_order_relaxed);
    gvls_trace_record(GVLS_EV_ARG, stack, now_ns);  // right after SUSPENDED, in the same lane
}

uint32_t gvls_stacks_capture_site(void) {
    if (!atomic_load_explicit(&gvls_stacks.on, memory_order_relaxed)) return 0;
    uint32_t stack = capture(SITE_DEPTH);
    if (stack) atomic_fetch_add_explicit(&S.sites, 1, memory_order_relaxed);
    return stack;
}

// RUBY_INTERNAL_EVENT_SWITCH: the timer thread's tick reached the GVL holder, which happens only
// while another thread waits for the GVL. With the GVL, on the holder: its own stack is safe.
static void on_switch(VALUE tracepoint, void *unused) { gvls_stacks_sample_running(); }

void gvls_stacks_sample_running(void) {
    if (!atomic_load_explicit(&gvls_stacks.on, memory_order_relaxed) ||
        !atomic_load_explicit(&gvls_current_trace.active, memory_order_relaxed)) return;
    uint64_t now_ns = gvls_now_ns();
    gvls_thread *slot = gvls_thread_for(rb_thread_current());
    if (!slot) return;
    uint32_t stack = capture(SAMPLE_DEPTH);
    if (!stack) return;
    atomic_fetch_add_explicit(&S.samples, 1, memory_order_relaxed);
    gvls_trace_record(GVLS_EV_SAMPLE, slot->serial, now_ns);
    gvls_trace_record(GVLS_EV_ARG, stack, now_ns);
}

void gvls_stacks_init(void) {
    switch_tracepoint = rb_tracepoint_new(0, RUBY_INTERNAL_EVENT_SWITCH, on_switch, NULL);
    rb_gc_register_address(&switch_tracepoint);
    // A non-NULL data pointer: CRuby skips the mark function of a T_DATA whose pointer is NULL.
    holder = TypedData_Wrap_Struct(0, &holder_type, &S);
    rb_gc_register_mark_object(holder);
}

static void reset_waiting(gvls_thread *slot, void *unused) {
    slot->stacks_waiting = 0;
}

int gvls_stacks_start(void) {
    gvls_stacks_free();
    S.locations = malloc((MAX_LOCATIONS + 1) * sizeof(location));
    S.stacks = malloc((MAX_STACKS + 1) * sizeof(stack_entry));
    S.location_slots = calloc(TABLE_SLOTS, sizeof(uint32_t));
    S.stack_slots = calloc(TABLE_SLOTS, sizeof(uint32_t));
    S.pool = malloc(POOL_SIZE * sizeof(uint16_t));
    if (!S.locations || !S.stacks || !S.location_slots || !S.stack_slots || !S.pool) {
        gvls_stacks_free();
        return ENOMEM;
    }
    S.pool_used = 0;
    S.sites = S.samples = S.dropped = S.unreadable = 0;
    // Waiting flags left by an earlier trace would skew the count: start from nobody waiting
    // (threads already waiting are counted from their next READY).
    gvls_threads_each(reset_waiting, NULL);
    atomic_store(&gvls_stacks.waiting, 0);
    atomic_store(&gvls_stacks.on, 1);
    // Enabled in the calling (main) Ractor only, like the GC tracepoint: other Ractors get release
    // sites but no holder samples.
    rb_tracepoint_enable(switch_tracepoint);
    tracepoint_enabled = 1;
    return 0;
}

void gvls_stacks_pause(void) {
    atomic_store(&gvls_stacks.on, 0);
    if (!tracepoint_enabled) return;
    rb_tracepoint_disable(switch_tracepoint);
    tracepoint_enabled = 0;
}

int gvls_stacks_active(void) {
    return S.locations != NULL;
}

void gvls_stacks_free(void) {
    // Unpublished first: the mark function must not read what is freed.
    atomic_store(&S.location_count, 0);
    atomic_store(&S.stack_count, 0);
    free(S.locations); free(S.stacks); free(S.location_slots); free(S.stack_slots); free(S.pool);
    S.locations = NULL; S.stacks = NULL; S.location_slots = S.stack_slots = NULL; S.pool = NULL;
}

// Inside fork(2) (a pthread_atfork child handler): C only. Sampling stops at once (on_switch
// checks `on`); the tracepoint itself is disabled by gvls_stacks_pause from Ruby's after-fork.
void gvls_stacks_after_fork(void) {
    atomic_store(&gvls_stacks.on, 0);
    gvls_stacks_free();
    atomic_flag_clear(&S.busy);  // a thread of the parent may have held it
}

static void append_string(VALUE buffer, VALUE string, uint32_t *bytes) {
    if (!RB_TYPE_P(string, T_STRING)) { *bytes = 0; return; }
    *bytes = (uint32_t)RSTRING_LEN(string);
    rb_str_buf_cat(buffer, RSTRING_PTR(string), RSTRING_LEN(string));
}

int gvls_write_stacks_chunk(const gvls_out *out) {
    if (!gvls_stacks_active()) return 0;
    // Snapshot: everything the records written so far refer to is at or below these counts.
    gvls_stacks_header header = {
        .location_count = atomic_load_explicit(&S.location_count, memory_order_acquire),
        .stack_count = atomic_load_explicit(&S.stack_count, memory_order_acquire),
        .sites = S.sites, .samples = S.samples, .dropped = S.dropped, .unreadable = S.unreadable,
    };
    VALUE buffer = rb_str_buf_new(sizeof(header) + 64 * (long)header.location_count);
    rb_str_buf_cat(buffer, (const char *)&header, sizeof(header));
    VALUE strings = rb_str_buf_new(64);
    for (uint32_t id = 1; id <= header.location_count; id++) {
        location loc = S.locations[id];
        gvls_location_record record = { .line = loc.line > 0 ? (uint32_t)loc.line : 0 };
        rb_str_set_len(strings, 0);
        append_string(strings, rb_profile_frame_full_label(loc.frame), &record.label_bytes);
        append_string(strings, rb_profile_frame_path(loc.frame), &record.path_bytes);
        rb_str_buf_cat(buffer, (const char *)&record, sizeof(record));
        rb_str_buf_append(buffer, strings);
    }
    for (uint32_t id = 1; id <= header.stack_count; id++) {
        stack_entry entry = S.stacks[id];
        rb_str_buf_cat(buffer, (const char *)&entry.depth, sizeof(uint32_t));
        for (uint32_t k = 0; k < entry.depth; k++) {
            uint32_t location_id = S.pool[entry.offset + k];
            rb_str_buf_cat(buffer, (const char *)&location_id, sizeof(uint32_t));
        }
    }
    gvls_chunk_header chunk = { GVLS_CHUNK_STACKS, (uint32_t)RSTRING_LEN(buffer) };
    int err = gvls_write_all(out, &chunk, sizeof(chunk));
    if (!err) err = gvls_write_all(out, RSTRING_PTR(buffer), RSTRING_LEN(buffer));
    RB_GC_GUARD(buffer);
    RB_GC_GUARD(strings);
    return err;
}
