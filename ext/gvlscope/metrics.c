// Metrics: per-thread counters (single writer: the hook calls about that thread) and a gauge of
// threads waiting for the GVL per Ractor (atomic). Snapshots sum threads and add the part of the
// current state that has not ended yet, so a thread running alone shows its hold before it ends.
#include "metrics.h"
#include "metrics_event.h"
#include "clock.h"
#include "format.h"
#include "histogram.h"
#include "record_names.h"
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#define M gvls_metrics

// ---- Ruby-visible side: enable, disable, reset, snapshot -------------------------------------

static gvls_thread_metrics retired;  // threads that exited, folded in by a snapshot

// How a total takes a thread's counter (GVLS_THREAD_COUNTERS' second column).
#define ADD_SUM(total, value) ((total) += (value))
#define ADD_MAX(total, value) ((total) = (value) > (total) ? (value) : (total))
#define ADD_COUNTER(name, how) ADD_##how(into->name, m->name);

static void add_counters(gvls_thread_metrics *into, const gvls_thread_metrics *m) {
    GVLS_THREAD_COUNTERS(ADD_COUNTER)
    for (int b = 0; b < GVLS_HISTOGRAM_BUCKETS; b++) {
        into->hold_histogram[b] += m->hold_histogram[b];
        into->wait_histogram[b] += m->wait_histogram[b];
        into->waiters_histogram[b] += m->waiters_histogram[b];
    }
}

static void reset_waiting(void) {
    for (int r = 0; r < GVLS_MAX_RACTORS; r++) {
        atomic_store(&M.ractors[r].readied, 0); atomic_store(&M.ractors[r].acquired, 0); atomic_store(&M.ractors[r].abandoned, 0);
    }
}

static void zero_counters(gvls_thread_metrics *m) {
    uint8_t state = m->state, others = m->others_wanted, yielded = m->yielded;
    uint32_t native = m->suspend_native;
    uint64_t seq = m->resume_seq_at_suspend, since = m->since_ns, hold = m->hold_started_ns, gc = m->gc_started_ns;
    memset(m, 0, sizeof(*m));
    m->state = state; m->others_wanted = others; m->yielded = yielded; m->suspend_native = native;
    m->resume_seq_at_suspend = seq; m->since_ns = since; m->hold_started_ns = hold; m->gc_started_ns = gc;
}

static void reset_slot(gvls_thread *slot, void *unused) {
    uint8_t retired = slot->metrics.retired;  // whether its thread's row was given: still true
    zero_counters(&slot->metrics);
    slot->metrics.retired = retired;
}

static void forget_slot(gvls_thread *slot, void *unused) {
    uint8_t retired = slot->metrics.retired;
    memset(&slot->metrics, 0, sizeof(slot->metrics));
    slot->metrics.retired = retired;
    slot->metrics.state = slot->exited ? GVLS_STATE_EXITED : GVLS_STATE_UNKNOWN;
}

// The calling thread holds the GVL: it is running from now on.
static void mark_caller_running(uint64_t now_ns) {
    gvls_thread *self = gvls_thread_for(rb_thread_current());
    if (!self) return;
    self->metrics.state = GVLS_STATE_RUN;
    self->metrics.since_ns = self->metrics.hold_started_ns = now_ns;
}

static void (*switched)(void);  // hook.c's sync (gvls_metrics_on_switch)

void gvls_metrics_on_switch(void (*fn)(void)) {
    switched = fn;
}

static VALUE metrics_enable(VALUE self, VALUE timeslice_ns) {
    if (atomic_load(&M.enabled)) return Qfalse;
    M.timeslice_ns = NUM2ULL(timeslice_ns);
    gvls_threads_prune_dead();
    uint64_t now_ns = gvls_now_ns();
    gvls_threads_each(forget_slot, NULL);  // states from an earlier enable are stale
    memset(&retired, 0, sizeof(retired));
    reset_waiting();
    for (int r = 0; r < GVLS_MAX_RACTORS; r++) atomic_store(&M.ractors[r].resume_seq, 0);
    M.epoch_ns = now_ns;
    mark_caller_running(now_ns);
    atomic_store(&M.enabled, 1);
    if (switched) switched();  // installs the hook
    return Qtrue;
}

static void forget_other_thread(gvls_thread *slot, void *current) {
    if (slot->thread == (VALUE)current) return;
    slot->exited = 1;
    slot->metrics.state = GVLS_STATE_EXITED;
}

void gvls_metrics_after_fork(void) {
    gvls_threads_each(forget_other_thread, (void *)rb_thread_current());
    reset_waiting();
    if (atomic_load(&M.enabled)) {
        M.epoch_ns = gvls_now_ns();
        gvls_threads_each(reset_slot, NULL);
        memset(&retired, 0, sizeof(retired));
        mark_caller_running(M.epoch_ns);
    }
    gvls_threads_prune_exited();
}

static VALUE metrics_disable(VALUE self) {
    if (!atomic_load(&M.enabled)) return Qfalse;
    atomic_store(&M.enabled, 0);
    if (switched) switched();  // removes the hook unless a trace records
    gvls_threads_prune_dead();
    return Qtrue;
}

static VALUE metrics_enabled_p(VALUE self) {
    return atomic_load(&M.enabled) ? Qtrue : Qfalse;
}

static VALUE metrics_reset(VALUE self) {
    M.epoch_ns = gvls_now_ns();
    gvls_threads_each(reset_slot, NULL);
    memset(&retired, 0, sizeof(retired));
    return Qnil;
}

static void copy_counters(gvls_thread_metrics *m, const gvls_thread_metrics *live) {
    m->state = live->state; m->since_ns = live->since_ns; m->gc_started_ns = live->gc_started_ns;
    m->others_wanted = live->others_wanted; m->last_hold_ns = live->last_hold_ns;  // release_undecided
    m->resume_seq_at_suspend = live->resume_seq_at_suspend;
    m->wait_ns_at_wake = live->wait_ns_at_wake;
#define COPY_COUNTER(name, how) m->name = live->name;
    GVLS_THREAD_COUNTERS(COPY_COUNTER)  // every counter: gvls_metrics_counters_now's values are made of them
}

void gvls_metrics_read(const gvls_thread *slot, gvls_thread_metrics *out, int with_histograms) {
    gvls_thread *writable = (gvls_thread *)slot;  // C11 atomics cannot be loaded through a const pointer
    for (unsigned tries = 0;; tries++) {
        uint32_t before = atomic_load_explicit(&writable->metrics_seq, memory_order_acquire);
        if (with_histograms) *out = slot->metrics; else copy_counters(out, &slot->metrics);
        atomic_thread_fence(memory_order_acquire);  // the copy is done before the second read
        uint32_t after = atomic_load_explicit(&writable->metrics_seq, memory_order_relaxed);
        if (before == after && !(before & 1)) return;
        // A hook writes for ~100 ns; one descheduled mid-write is waited for. A writer that can
        // never finish (its native thread vanished in a fork) is not: after ~1 s the copy stands.
        if (tries >= 64) sched_yield();
        if (tries >= 100000) return;
    }
}

// The RESUMED count of the slot's Ractor, read before the slot is copied (release_undecided).
static uint64_t resume_seq_before_copy(const gvls_thread *slot) {
    return atomic_load_explicit(&M.ractors[ractor_slot(slot)].resume_seq, memory_order_acquire);
}

// Idle after a release that READY may still call a preemption: READY then moves the time since
// SUSPENDED to wait_ns (metrics_event.h), so counting it as idle here made idle_ns go back (by the
// 32 ms a loaded machine kept a Thread.pass-ing thread off the CPU between SUSPENDED and READY).
// It counts as neither until READY, or until another thread of the Ractor got the GVL after the
// SUSPENDED (its RESUMED count, read before the copy, moved past the one seen then: no preemption).
static int release_undecided(const gvls_thread_metrics *m, uint64_t resume_seq) {
    return m->state == GVLS_STATE_IDLE && m->others_wanted && m->last_hold_ns >= M.timeslice_ns / 2 &&
           resume_seq <= m->resume_seq_at_suspend;
}

// The part of the current state that has not ended yet: run, wait, idle, gc ns to add.
static void in_progress(const gvls_thread_metrics *m, uint64_t now_ns, uint64_t resume_seq, uint64_t add[4]) {
    add[0] = add[1] = add[2] = add[3] = 0;
    switch (m->state) {
      case GVLS_STATE_RUN:
        if (m->gc_started_ns) add[3] = elapsed(m->gc_started_ns, now_ns);
        else add[0] = elapsed(m->since_ns, now_ns);
        break;
      case GVLS_STATE_WAIT: add[1] = elapsed(m->since_ns, now_ns); break;
      case GVLS_STATE_IDLE: if (!release_undecided(m, resume_seq)) add[2] = elapsed(m->since_ns, now_ns); break;
    }
}

static void add_in_progress(gvls_thread_metrics *m, uint64_t now_ns, uint64_t resume_seq) {
    uint64_t add[4];
    in_progress(m, now_ns, resume_seq, add);
    m->run_ns += add[0]; m->wait_ns += add[1]; m->idle_ns += add[2]; m->gc_ns += add[3];
}

// Copies the state and the counters, not the histograms (1.5 KiB): this runs twice per web request.
void gvls_metrics_counters_now(const gvls_thread *slot, uint64_t now_ns, uint64_t out[GVLS_COUNTERS_NOW],
                               uint64_t *wait_ns_at_wake) {
    gvls_thread_metrics m;
    uint64_t resume_seq = resume_seq_before_copy(slot);
    gvls_metrics_read(slot, &m, 0);
    add_in_progress(&m, now_ns, resume_seq);
#define OUT_NOW(name, value) out[GVLS_NOW_##name] = (value);
    GVLS_NOW_COUNTERS(OUT_NOW)
    // released_blocking counts the wakes: none since counting began, no wake is known.
    if (wait_ns_at_wake) *wait_ns_at_wake = m.released_blocking ? m.wait_ns_at_wake : GVLS_NEVER_WOKE;
}

// What gvls_metrics_wait_since reads of a slot, copied under the seqlock.
typedef struct {
    uint8_t state;
    uint64_t since_ns, waits, wait_ns;
    uint64_t start[GVLS_WAIT_LOG], end[GVLS_WAIT_LOG];
} wait_log_copy;

static void read_wait_log(const gvls_thread *slot, wait_log_copy *out) {
    gvls_thread *writable = (gvls_thread *)slot;
    const gvls_thread_metrics *m = &slot->metrics;
    for (unsigned tries = 0;; tries++) {
        uint32_t before = atomic_load_explicit(&writable->metrics_seq, memory_order_acquire);
        out->state = m->state; out->since_ns = m->since_ns; out->waits = m->waits; out->wait_ns = m->wait_ns;
        memcpy(out->start, m->wait_log_start, sizeof(out->start));
        memcpy(out->end, m->wait_log_end, sizeof(out->end));
        atomic_thread_fence(memory_order_acquire);
        uint32_t after = atomic_load_explicit(&writable->metrics_seq, memory_order_relaxed);
        if (before == after && !(before & 1)) return;
        if (tries >= 64) sched_yield();  // as gvls_metrics_read
        if (tries >= 100000) return;
    }
}

// The wait log's sums, on a copy (another thread's slot) or in place (the caller's own).
static uint64_t log_wait_since(uint8_t state, uint64_t since_ns, uint64_t waits, uint64_t wait_ns,
                               const uint64_t *start, const uint64_t *end, uint64_t from_ns, uint64_t now_ns,
                               int *exact, uint64_t *wait_ns_now) {
    uint64_t total = 0;
    // A wait in progress: READY came, RESUMED not yet.
    if (state == GVLS_STATE_WAIT) {
        uint64_t begun = since_epoch(since_ns) > from_ns ? since_epoch(since_ns) : from_ns;
        if (now_ns > begun) total += now_ns - begun;
        if (wait_ns_now) *wait_ns_now = wait_ns + elapsed(since_ns, now_ns);
    } else if (wait_ns_now) {
        *wait_ns_now = wait_ns;
    }
    uint64_t logged = waits < GVLS_WAIT_LOG ? waits : GVLS_WAIT_LOG;
    int reached = 0;  // a logged wait ended at or before from_ns: everything after it is counted
    for (uint64_t k = 0; k < logged; k++) {
        unsigned i = (unsigned)(waits - 1 - k) & (GVLS_WAIT_LOG - 1);
        if (end[i] <= from_ns) { reached = 1; break; }
        total += end[i] - (start[i] > from_ns ? start[i] : from_ns);
    }
    // Every wait since counting began was logged, or the log goes back past from_ns.
    if (exact) *exact = reached || waits <= GVLS_WAIT_LOG;
    return total;
}

uint64_t gvls_metrics_wait_since(const gvls_thread *slot, uint64_t from_ns, uint64_t now_ns, int *exact,
                                 uint64_t *wait_ns_now) {
    wait_log_copy log;
    read_wait_log(slot, &log);
    return log_wait_since(log.state, log.since_ns, log.waits, log.wait_ns, log.start, log.end, from_ns, now_ns,
                          exact, wait_ns_now);
}

// The caller's own slot, with the GVL: no hook writes it meanwhile (CRuby runs a thread's events on
// that thread), so the log is read in place, without the copy and its retries (hand-offs: every
// request under Puma).
uint64_t gvls_metrics_own_wait_since(const gvls_thread *slot, uint64_t from_ns, uint64_t now_ns, int *exact,
                                     uint64_t *wait_ns_now) {
    const gvls_thread_metrics *m = &slot->metrics;
    return log_wait_since(m->state, m->since_ns, m->waits, m->wait_ns, m->wait_log_start, m->wait_log_end,
                          from_ns, now_ns, exact, wait_ns_now);
}

uint64_t gvls_metrics_own_arrival(const gvls_thread *slot, uint64_t from_ns, uint64_t to_ns, uint64_t now_ns,
                                  uint64_t *wait_since_ns, int *exact) {
    const gvls_thread_metrics *m = &slot->metrics;
    uint64_t fallback_ns = to_ns < now_ns ? to_ns : now_ns, total = 0;
    uint64_t logged = m->waits < GVLS_WAIT_LOG ? m->waits : GVLS_WAIT_LOG;
    for (uint64_t k = 0; k < logged; k++) {  // newest first; the thread runs: no wait in progress
        unsigned i = (unsigned)(m->waits - 1 - k) & (GVLS_WAIT_LOG - 1);
        uint64_t start = m->wait_log_start[i], end = m->wait_log_end[i];
        if (start > to_ns) {  // after the window: after the arrival, whichever it is
            total += end - start;
            continue;
        }
        *exact = 1;
        if (start >= from_ns) {  // the latest wake in the window
            *wait_since_ns = total + end - start;
            return start;
        }
        if (end > fallback_ns) total += end - fallback_ns;  // none in it: the part after the fallback
        *wait_since_ns = total;
        return fallback_ns;
    }
    *exact = m->waits <= GVLS_WAIT_LOG;  // else older waits are gone: a lower bound
    *wait_since_ns = total;
    return fallback_ns;
}

// The caller is the slot's own thread, holding the GVL: no hook writes this slot meanwhile (a
// thread's events run on it); the seqlock is for the readers on other threads.
void gvls_metrics_request_started(gvls_thread *slot) {
    uint32_t seq = gvls_metrics_write_begin(slot);
    slot->metrics.pending_overlap_ns = 0;
    gvls_metrics_write_end(slot, seq);
}

static void counters_of(const gvls_thread_metrics *m, uint64_t *out) {
#define COUNTER_VALUE(name, how) out[GVLS_COUNTER_##name] = m->name;
    GVLS_THREAD_COUNTERS(COUNTER_VALUE)
}

static VALUE counters_array(const gvls_thread_metrics *m) {
    uint64_t values[COUNTER_FIELDS];
    counters_of(m, values);
    VALUE row = rb_ary_new_capa(COUNTER_FIELDS);
    for (int i = 0; i < COUNTER_FIELDS; i++) rb_ary_push(row, ULL2NUM(values[i]));
    return row;
}

// Packs one row: GVLS_THREAD_ROW_IDENTITY, then the counters.
static void pack_row(const gvls_thread *slot, const gvls_thread_metrics *m, char *rows) {
    uint64_t row[ROW_FIELDS] = { [GVLS_ROW_serial] = slot->serial, [GVLS_ROW_ractor_id] = slot->ractor_id,
                                 [GVLS_ROW_state] = m->state, [GVLS_ROW_exited] = (uint64_t)slot->exited };
    counters_of(m, row + GVLS_ROW_COUNTERS);
    memcpy(rows, row, sizeof(row));
}

// Histograms are summed over threads in C: copying 1.5 KB per thread to Ruby would dominate.
static void add_histograms(uint64_t *sum, const gvls_thread_metrics *m) {
    for (int b = 0; b < GVLS_HISTOGRAM_BUCKETS; b++) {
        sum[b] += m->hold_histogram[b];
        sum[GVLS_HISTOGRAM_BUCKETS + b] += m->wait_histogram[b];
        sum[2 * GVLS_HISTOGRAM_BUCKETS + b] += m->waiters_histogram[b];
    }
}

typedef struct {
    uint64_t now_ns;
    size_t capacity, len;
    VALUE *threads;          // malloc'd: filled under the lock, turned into an Array after
    char *rows;              // inside a Ruby string allocated before the lock
    uint64_t histograms[3 * GVLS_HISTOGRAM_BUCKETS];
    gvls_thread_metrics copy;  // the slot being read, copied consistently (1.5 KiB: not on the stack per slot)
} snapshot_fill;

static void count_slot(gvls_thread *slot, void *count) {
    if (!slot->metrics.retired) ++*(size_t *)count;
}

// Under the registry lock: no allocation of Ruby objects here (GC marking takes this lock).
static void fill_slot(gvls_thread *slot, void *arg) {
    snapshot_fill *fill = arg;
    if (slot->metrics.retired || fill->len == fill->capacity) return;
    size_t i = fill->len++;
    fill->threads[i] = slot->thread != Qfalse ? slot->thread : slot->name;  // released: its name, read at exit
    // Whether the thread has exited, read before its metrics: if so, they are final.
    int exited = atomic_load_explicit(&slot->exited, memory_order_acquire);
    gvls_thread_metrics *m = &fill->copy;
    uint64_t resume_seq = resume_seq_before_copy(slot);
    gvls_metrics_read(slot, m, 1);
    uint64_t *row = (uint64_t *)(fill->rows + i * ROW_FIELDS * sizeof(uint64_t));
    pack_row(slot, m, (char *)row);
    add_histograms(fill->histograms, m);
    // The unfinished part of the current state, added to the packed counters (run, wait, idle, gc).
    uint64_t add[4];
    in_progress(m, fill->now_ns, resume_seq, add);
    uint64_t *counters = row + GVLS_ROW_COUNTERS;
    counters[GVLS_COUNTER_run_ns] += add[0]; counters[GVLS_COUNTER_wait_ns] += add[1];
    counters[GVLS_COUNTER_idle_ns] += add[2]; counters[GVLS_COUNTER_gc_ns] += add[3];
    if (exited) {  // reported once more now, then only as part of the retired totals
        add_counters(&retired, m);
        slot->metrics.retired = 1;
    }
}

// The waiting gauge of Ractor r, read from another native thread while that Ractor's hooks count.
// The three counters are loaded one after the other: every acquire or abandon between the loads
// of acquired and of readied would add one (a snapshot preempted there showed 127 waiting of 33
// threads). So acquired and abandoned are read again after readied: unchanged, the three values
// held together at the moment readied was read. A few tries, then the plain read.
static int64_t waiting_threads_consistent(int r) {
    gvls_ractor_counters *c = &M.ractors[r];
    for (int tries = 0; tries < 64; tries++) {
        uint64_t acquired = atomic_load_explicit(&c->acquired, memory_order_acquire);
        uint64_t abandoned = atomic_load_explicit(&c->abandoned, memory_order_acquire);
        uint64_t readied = atomic_load_explicit(&c->readied, memory_order_acquire);
        if (atomic_load_explicit(&c->acquired, memory_order_acquire) == acquired &&
            atomic_load_explicit(&c->abandoned, memory_order_acquire) == abandoned) {
            return (int64_t)(readied - acquired - abandoned);
        }
    }
    return gvls_waiting_threads(r);
}

// Native.metrics_snapshot -> [now_ns, epoch_ns, waiting_threads_by_ractor, threads, rows, histograms]
//   threads: the Thread of each row, or for a thread that exited its name as read then ("" if
//     none); nil for the last row: threads that exited earlier, together
//   rows: ROW_FIELDS little-endian uint64 per row
//   histograms: hold, wait and waiters-at-acquire (3 x 64 uint64), summed over all threads
// Packed straight from the registry, so a snapshot of many threads costs a few allocations;
// Ruby unpacks what it reads.
static VALUE metrics_snapshot(VALUE self) {
    gvls_threads_release_exited();  // before the prune at the end, which leaves queued slots
    size_t count = 0;
    gvls_threads_each(count_slot, &count);
    snapshot_fill fill = { .capacity = count + 16 };  // room for threads born meanwhile
    memset(fill.histograms, 0, sizeof(fill.histograms));
    VALUE rows = rb_str_new(NULL, (long)((fill.capacity + 1) * ROW_FIELDS * sizeof(uint64_t)));
    fill.threads = malloc(fill.capacity * sizeof(VALUE));
    if (!fill.threads) rb_raise(rb_eNoMemError, "gvlscope: no memory for a snapshot");
    fill.rows = RSTRING_PTR(rows);
    // Threads that exited since the last snapshot are rows this once and join `retired` after.
    gvls_thread_metrics retired_now = retired;
    fill.now_ns = gvls_now_ns();
    gvls_threads_each(fill_slot, &fill);

    gvls_thread none = { .exited = 1 };
    retired_now.state = GVLS_STATE_EXITED;
    pack_row(&none, &retired_now, fill.rows + fill.len * ROW_FIELDS * sizeof(uint64_t));
    add_histograms(fill.histograms, &retired_now);
    rb_str_set_len(rows, (long)((fill.len + 1) * ROW_FIELDS * sizeof(uint64_t)));
    VALUE histograms = rb_str_new((const char *)fill.histograms, sizeof(fill.histograms));
    VALUE threads = rb_ary_new_capa((long)fill.len + 1);
    for (size_t i = 0; i < fill.len; i++) rb_ary_push(threads, fill.threads[i]);
    rb_ary_push(threads, Qnil);
    free(fill.threads);

    VALUE waiting = rb_hash_new();
    for (int r = 0; r < GVLS_MAX_RACTORS; r++) {
        int64_t n = waiting_threads_consistent(r);
        if (n > 0) rb_hash_aset(waiting, INT2NUM(r), LL2NUM(n));
    }
    gvls_threads_prune_exited();
    return rb_ary_new_from_args(6, ULL2NUM(fill.now_ns), ULL2NUM(M.epoch_ns), waiting, threads, rows, histograms);
}

// Native.metrics_thread(thread) -> counters of one thread (in-progress state included), or nil
static VALUE metrics_thread(VALUE self, VALUE thread) {
    uint64_t now_ns = gvls_now_ns();
    // Only the caller's own thread gets a slot made here; another thread may have exited.
    gvls_thread *slot = thread == rb_thread_current() ? gvls_thread_for(thread) : gvls_thread_find(thread);
    if (!slot) return Qnil;
    gvls_thread_metrics m;
    uint64_t resume_seq = resume_seq_before_copy(slot);
    gvls_metrics_read(slot, &m, 1);
    add_in_progress(&m, now_ns, resume_seq);
    return counters_array(&m);
}

static VALUE metrics_now_ns(VALUE self) {
    return ULL2NUM(gvls_now_ns());
}

// The registry frees an exited slot only once its metrics were retired (reported by a snapshot,
// then added to the totals), or if metrics are off. Told through a listener: the thread state is
// below the metrics and calls them by no name.
static int keeps_slot(const gvls_thread *slot) {
    return !slot->metrics.retired && atomic_load(&M.enabled);
}

// A thread that died while the hook was off: it is counted as exited from now on.
static void died_unseen(gvls_thread *slot) {
    slot->metrics.state = GVLS_STATE_EXITED;
}

static const gvls_slot_listener slot_listener = { .keeps = keeps_slot, .died_unseen = died_unseen };

void gvls_metrics_init(VALUE mNative) {
    gvls_threads_listen(&slot_listener);
    rb_define_singleton_method(mNative, "metrics_enable", metrics_enable, 1);
    rb_define_singleton_method(mNative, "metrics_disable", metrics_disable, 0);
    rb_define_singleton_method(mNative, "metrics_enabled?", metrics_enabled_p, 0);
    rb_define_singleton_method(mNative, "metrics_reset", metrics_reset, 0);
    rb_define_singleton_method(mNative, "metrics_snapshot", metrics_snapshot, 0);
    rb_define_singleton_method(mNative, "metrics_thread", metrics_thread, 1);
    rb_define_singleton_method(mNative, "now_ns", metrics_now_ns, 0);
    static const char *const names[] = GVLS_STATE_NAMES;
    VALUE states = rb_ary_new();
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) rb_ary_push(states, ID2SYM(rb_intern(names[i])));
    rb_define_const(mNative, "STATES", rb_ary_freeze(states));
    // The records' field names (metrics.h), for Ruby's Structs of them (Metrics::ThreadRow).
#define COUNTER_NAME(name, how) #name,
#define MAXIMUM_NAME(name, how) IS_##how(#name)
#define IS_SUM(name)
#define IS_MAX(name) name,
#define ROW_NAME(name) #name,
    static const char *const counters[] = { GVLS_THREAD_COUNTERS(COUNTER_NAME) };
    static const char *const maxima[] = { GVLS_THREAD_COUNTERS(MAXIMUM_NAME) };
    static const char *const identity[] = { GVLS_THREAD_ROW_IDENTITY(ROW_NAME) };
    rb_define_const(mNative, "THREAD_COUNTERS", gvls_symbols(counters, COUNTER_FIELDS));
    rb_define_const(mNative, "MAXIMUM_COUNTERS", gvls_symbols(maxima, sizeof(maxima) / sizeof(*maxima)));
    rb_define_const(mNative, "THREAD_ROW", rb_ary_freeze(rb_ary_plus(gvls_symbols(identity, GVLS_ROW_COUNTERS),
                                                                     gvls_symbols(counters, COUNTER_FIELDS))));
    // io_overlap_wait_ns's bounds (metrics_event.h), for a trace's reading of the same
    // (Analysis::AdvisorInputs.io_overlap_wait_ns).
    rb_define_const(mNative, "QUICK_RELEASE_NS", ULL2NUM(GVLS_QUICK_RELEASE_NS));
    rb_define_const(mNative, "OVERLAP_HOLD_NS", ULL2NUM(GVLS_OVERLAP_HOLD_NS));
}
