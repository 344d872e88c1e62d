// What the files of one pass over an index share: the engine's state (its types and macros) and
// what they call in each other. pass.c drives the pass (and lists the files); merge.c,
// state_machine.c, threads.c and the consumers are its steps. A header of its own, not pass.c's,
// so that the steps depend on the state and pass.c on the steps: no file calls back up.
#ifndef GVLSCOPE_ENGINE_PASS_SHARED_H
#define GVLSCOPE_ENGINE_PASS_SHARED_H

#include "engine.h"

enum { RUN_REF_NONE = -1, RUN_REF_GHOST = -2 };

// The exports' copy of each thread's intervals (spill.c): compact records in blocks, in memory
// until a block fills, then in an unlinked temporary file.
typedef struct {
    uint8_t *buffer;       // the block being filled
    uint32_t used;
    eng_vec blocks;        // uint64_t offset << 16 | length, in the spill file
    int64_t last_end;
    uint64_t intervals;
} eng_stream;

typedef struct {
    uint32_t serial;
    uint32_t ractor;          // index in ractors
    int32_t order;            // order of first appearance (Timeline#threads), -1 before
    int32_t cursor_order;     // order of its first event (the Ruby scan's cursors), -1 before
    // the cursor (test/support/reference_timeline.rb's Cursor)
    uint8_t state, reason, site_cause, counted;
    uint8_t has_native, has_suspend_native, others_wanted, has_resumed_at;
    uint8_t first_kind;       // its first event's kind, 0 when none
    int64_t since, suspend_time, resumed_at;
    uint32_t native, suspend_native;
    uint64_t resumes_at_suspend;
    int32_t run_ref;          // the last run interval, which later events may still change
    eng_interval ghost;       // a zero-length run: changed, never listed
    eng_interval *pending;    // listed intervals not final yet (from the run interval on)
    uint32_t pending_size, pending_capacity;
    uint8_t last_listed_state;
    // ThreadStats::Row, from the final intervals
    uint8_t previous_state;
    int64_t totals[ST_COUNT];
    uint64_t holds, waits;
    uint64_t released[R_COUNT];
    uint8_t release_order[R_COUNT]; // reasons in order of their first release (the row's Hash order)
    uint8_t release_kinds;
    int64_t longest_run[2], longest_wait[2], longest_slow[2], longest_gc[2];
    uint8_t has_longest_run, has_longest_wait, has_longest_slow, has_longest_gc;
    uint64_t blocking_waits, slow_blocking_waits;
    int64_t blocking_wait_ns;
    eng_median wait_median, slow_median;
    // hold streaks (ThreadStats::Row, thread_stats.rb's Streaks): the open one, the long ones
    uint8_t streak_open, has_longest_streak;
    int64_t streak_start, streak_end, streak_held, streak_off;
    uint64_t long_streaks;
    int64_t long_streak_held, longest_streak[2], longest_streak_held;
    // of those holds, the time the OS kept the thread off a CPU, where CPU samples measure it (cpu_time.c)
    int64_t held_off, long_streak_off, longest_streak_off;
    int64_t idle_by_reason[R_COUNT];
    // IO overlap (ReferenceIOOverlap): counted, pending, the hold since the last release
    int64_t overlap_counted, overlap_pending, overlap_hold;
    uint8_t overlap_woke_at_once;
    // Histograms
    uint64_t hold_histogram[LOG2_BUCKETS], wait_histogram[LOG2_BUCKETS];
    int64_t hold_ns;
    uint8_t hold_open;
    // release sites: the run that released the GVL at a site, and the wait after it so far
    uint8_t release_open, release_reason;
    uint32_t release_site;
    int64_t release_waited;
    // Blame: the first wait (listed), first wait after a blocking call, first wait during a GC
    uint8_t has_first_wait, has_first_after_blocking, has_first_gc;
    int64_t first_wait, first_after_blocking, first_gc;
    int64_t during_gc;
    // Overview: bins [bin_low, bin_low + bin_count) x LANE_STATES (numbering.h)
    int64_t *bins;
    int32_t bin_low, bin_count;
    // exports
    eng_stream stream;
    uint8_t drawn;            // has an interval with end > start (speedscope draws the thread)
    uint8_t name_count;
    uint8_t names[32];        // name codes in order of first use among drawn intervals
    uint64_t listed;          // intervals listed so far (detail's order within the thread)
} eng_thread;

// A closed hold, or (sum_count > 0) a run of them folded into per-holder sums: a run whose span
// [start, end) has no possible wait's start strictly inside overlaps each such wait either whole
// or not at all, so the sums give blame the same numbers (see fold_holds in blame.c).
typedef struct {
    int64_t start, end;
    uint32_t thread;
    uint8_t gc;
    uint32_t sum_at, sum_count; // the run's eng_hold_sum entries, in order of the holders' first hold
} eng_hold;

typedef struct {
    uint32_t holder;
    int64_t ns, gc_ns;
} eng_hold_sum;

typedef struct {
    uint32_t id;
    int64_t waiting;          // threads in :wait as the Ruby scan counts them
    uint64_t resumes;         // RESUMED events so far (the preemption rule's generation)
    eng_vec holds;            // closed holds, in order of their end, from holds_head on
    eng_vec hold_sums;        // eng_hold_sum: the folded runs' per-holder sums
    size_t holds_head, prune_at;
    eng_vec holders;          // uint32_t: threads holding the GVL now
    eng_vec members;          // uint32_t: its threads
} eng_ractor;

typedef struct {
    int64_t time;
    uint32_t thread;
    uint32_t stack;
    int64_t waiters;
} eng_sample;

typedef struct {
    uint32_t a, b;            // blame: waiter, holder + 1 (0: hand-off); code: thread, stack
    uint32_t reason;          // release sites: the cause
    int64_t all_ns, after_blocking_ns;
    uint64_t all_seq, after_blocking_seq;
    uint64_t count;
    uint8_t has_all, has_after_blocking;
} eng_pair;

typedef struct {
    int64_t start, end;       // the window [start, end)
    uint64_t limit;
    eng_vec found;            // eng_found, a max-heap on (start, thread order, listed) of at most limit
    uint8_t done;
} eng_window;

typedef struct {
    eng_interval interval;
    int32_t thread_order;
    uint64_t listed;
} eng_found;

typedef struct {
    eng_item *items;
    uint32_t size, position;
    uint32_t chunk;
    uint32_t capacity;        // items allocated
} eng_cursor;

// The CPU chunks of the trace (cpu_time.c): the drain thread's ticks, in time order, and the
// native threads' CPU time samples, by native serial then time.
typedef struct {
    uint32_t native;
    int64_t time, cpu;
} eng_cpu_sample;

typedef struct {
    int64_t *ticks;
    size_t tick_count;
    eng_cpu_sample *samples;
    size_t sample_count;
} eng_cpu;

struct eng_engine {
    eng_memory memory;
    eng_index *index;
    // configuration
    int64_t timeslice_ns, duration_ns, slow_wait_ns;
    eng_cpu cpu;              // empty for a trace without CPU chunks
    uint8_t *stack_causes;    // per stack id: its release cause, 0 when the trace has no such stack
    size_t stack_limit;
    eng_map ractor_id_of;     // serial -> Ractor id (the thread table)
    uint32_t bins;
    int64_t bin_ns;
    bool blame, code, spill, windows_only;
    bool stats;               // rows, histograms and release sites (an export needs none)
    // threads and Ractors
    eng_vec threads;          // eng_thread
    eng_map thread_of;        // serial -> index
    uint32_t *small_serials;  // the same for serials below SMALL_SERIALS (most are): one load per event
    eng_vec order;            // uint32_t thread indexes, in order of first appearance
    eng_vec cursor_order;     // uint32_t, in order of first event
    eng_vec ractors;
    eng_map ractor_of;        // id -> index
    int64_t waiting_total;
    uint64_t waiters_at_acquire[LOG2_BUCKETS];
    // the waiting counter (the exports'): its last entry stays open while events share its time
    bool counter_open;
    int64_t counter_time, counter_value;
    eng_stream counter;
    uint64_t counter_entries;
    // samples, and what the code locations sum of them
    eng_vec samples;
    eng_vec lone_samples;   // holder samples no thread waited for: an event loop's long turn (fibers.c asks for them)
    eng_vec pairs;            // eng_pair: blame
    eng_map pair_of;
    eng_vec holder_stacks;    // eng_pair: (holder, stack) weight and count
    eng_map holder_stack_of;
    eng_vec stacks_sampled;   // eng_pair: (0, stack): all holders
    eng_map stack_sampled_of;
    eng_vec waiter_stacks;    // eng_pair: (waiter, stack): samples during its waits
    eng_map waiter_stack_of;
    eng_vec sites;            // eng_pair: (thread, site, reason): weight and count
    eng_map site_of;
    uint64_t sequence;
    eng_median all_waits;
    size_t exact_values;      // values all medians keep exactly, against median_budget
    size_t median_budget;
    // the native thread that ran each run first (Timeline#shared_native_threads?)
    eng_map native_owner;
    bool shared_natives;
    // detail windows
    eng_window *windows;
    size_t window_count;
    // merge
    size_t *pending_chunks;   // chunks by their first item, not yet in the heap
    size_t pending_next, pending_count, pending_capacity;
    eng_cursor *heap;
    size_t heap_size, heap_capacity;
    uint64_t *records;
    size_t records_capacity;
    eng_item *spare_items;    // a loaded chunk's items, kept for the next chunk
    uint32_t spare_capacity;
    size_t imported_next;
    eng_item *group;
    size_t group_size, group_capacity;
    bool started, finished;
    uint64_t groups;          // times processed so far
    int64_t now;
    uint64_t bytes_done;
    // spill file
    int spill_fd;
    uint64_t spill_size;
    char *spill_dir;
};

#define SMALL_SERIALS 65536
#define THREAD(engine, at) (&VEC_AT((engine)->threads, eng_thread, at))
#define RACTOR(engine, at) (&VEC_AT((engine)->ractors, eng_ractor, at))

eng_engine *eng_pass_new(eng_index *index);
int eng_pass_step(eng_engine *engine, uint64_t budget_bytes, bool *done); // 0 or -errno
void eng_pass_free(eng_engine *engine);
void eng_pass_configure_thread(eng_engine *engine, uint32_t serial, uint32_t ractor_id);
void eng_pass_add_window(eng_engine *engine, int64_t start, int64_t end, uint64_t limit);
void eng_windows_sorted(eng_engine *engine); // each window's found intervals in time order

// Between the pass's files (pass.c lists them), by file.
// median.c
void median_push(eng_engine *engine, eng_median *median, int64_t value);
int64_t eng_median_value(const eng_median *median);
void eng_median_free(eng_memory *memory, eng_median *median);
// threads.c
uint32_t thread_index(eng_engine *engine, uint32_t serial);
void register_thread(eng_engine *engine, uint32_t at);
eng_pair *pair(eng_engine *engine, eng_vec *pairs, eng_map *map, uint64_t key, uint32_t a, uint32_t b);
void set_state(eng_engine *engine, uint32_t at, uint8_t state);
void add_waiting(eng_engine *engine, uint32_t ractor, int64_t delta);
// blame.c
void blame_wait(eng_engine *engine, uint32_t at, int64_t start, int64_t end, bool after_blocking);
void blame_hold(eng_engine *engine, uint32_t at, const eng_interval *interval);
void samples_during(eng_engine *engine, uint32_t at, int64_t start, int64_t end);
// overview.c
void overview_add(eng_engine *engine, eng_thread *thread, const eng_interval *interval);
// cpu_time.c
void cpu_time_load(eng_engine *engine, const char *ticks, size_t tick_bytes, const char *samples, size_t sample_bytes);
void cpu_time_free(eng_engine *engine);
// Of a run or gc interval, the ns the OS measurably kept its native thread off a CPU (0 without samples).
int64_t cpu_time_off(const eng_engine *engine, const eng_interval *interval);
// thread_stats.c
void commit_release(eng_engine *engine, uint32_t at, eng_thread *thread);
void streak_close(eng_engine *engine, eng_thread *thread, bool paused);
void on_final(eng_engine *engine, uint32_t at, const eng_interval *interval);
// windows.c
void window_offer(eng_engine *engine, eng_window *window, const eng_found *found);
bool windows_settled(eng_engine *engine);
// state_machine.c
extern const uint8_t INFERRED_BEFORE[]; // by event kind: the state a thread was in before it
void settle(eng_engine *engine, uint32_t at);
void close_interval(eng_engine *engine, uint32_t at, int64_t time);
void process_event(eng_engine *engine, const eng_item *item);
void process_sample(eng_engine *engine, const eng_item *item);
// merge.c
int peek(eng_engine *engine, const eng_item **item);
void pop(eng_engine *engine);

// spill.c
int eng_stream_add(eng_engine *engine, eng_stream *stream, const eng_interval *interval);
int eng_counter_add(eng_engine *engine, int64_t time, int64_t value);
int eng_stream_finish(eng_engine *engine, eng_stream *stream);
void eng_stream_free(eng_engine *engine, eng_stream *stream);
// Reads a stream back: calls visit for each interval (thread index unset); stops on non-zero.
typedef int (*eng_visit)(void *data, const eng_interval *interval);
int eng_stream_each(eng_engine *engine, const eng_stream *stream, bool counter, eng_visit visit, void *data);

#endif
