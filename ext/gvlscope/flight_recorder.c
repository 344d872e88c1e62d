// The flight recorder: the trace's lanes (trace_buffer.c) as usual, but sealed chunks are kept in
// memory instead of written, and chunks older than the window (or past the byte budget) are freed.
// dump(path) writes what is kept, plus a copy of every lane's partly filled chunk, as a normal
// .gvl file starting at the window's start. The hook is untouched: it appends to lanes exactly as
// for a file trace, so recording costs the same and nothing stops while a dump is written.
#include "gvlscope.h"
#include "clock.h"
#include "hook.h"
#include "thread_state.h"
#include "trace.h"
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define T gvls_current_trace

static struct {
    int on;
    gvls_chunk *head, *tail;   // sealed chunks kept, oldest first; under T.lock
    size_t kept, max_kept;
    uint64_t window_ns;
    uint64_t start_realtime_ns;
    uint32_t timeslice_us;
    int dumping;               // one dump at a time (the GVL serialises callers)
    int keeper_running, keeper_stop;
    pthread_t keeper;
} R;

static uint64_t chunk_last_abs_ns(const gvls_chunk *chunk) {
    uint32_t count = chunk->header.count;
    uint64_t delta = count ? chunk->records[count - 1] >> GVLS_RECORD_DELTA_SHIFT : 0;
    return T.start_ns + chunk->header.base_ns + delta;
}

// Under T.lock. Frees (to the pool) the oldest chunks while the ring is over budget or they end
// before the window. Lanes then always find spare chunks: the ring keeps at most 3/4 of the pool.
static void evict_locked(uint64_t now_ns) {
    uint64_t cutoff = now_ns > R.window_ns ? now_ns - R.window_ns : 0;
    while (R.head && (R.kept > R.max_kept || chunk_last_abs_ns(R.head) < cutoff)) {
        gvls_chunk *old = R.head;
        R.head = old->next;
        if (!R.head) R.tail = NULL;
        R.kept--;
        gvls_trace_recycle(old);
    }
}

static void keep_locked(gvls_chunk *list) {
    for (gvls_chunk *chunk = list, *next; chunk; chunk = next) {
        next = chunk->next;
        chunk->next = NULL;
        if (R.tail) R.tail->next = chunk; else R.head = chunk;
        R.tail = chunk;
        R.kept++;
    }
}

// Takes the place of trace_writer.c's thread: moves sealed chunks into the ring.
static void *keeper_main(void *unused) {
    pthread_mutex_lock(&T.lock);
    while (!R.keeper_stop) {
        gvls_chunk *batch = gvls_trace_take_queue();
        if (!batch) { pthread_cond_wait(&T.wake_writer, &T.lock); continue; }
        keep_locked(batch);
        evict_locked(gvls_now_ns());
    }
    pthread_mutex_unlock(&T.lock);
    return NULL;
}

static void free_list(gvls_chunk *chunk) {
    for (gvls_chunk *next; chunk; chunk = next) { next = chunk->next; free(chunk); }
}

// Native.flight_start(window_ns, max_buffer_bytes, timeslice_us, threads_already_running)
static VALUE flight_start(VALUE self, VALUE window_ns, VALUE max_buffer_bytes, VALUE timeslice_us, VALUE threads) {
    if (atomic_load(&T.active) || T.fd >= 0) rb_raise(rb_eRuntimeError, "a trace is already running");
    size_t max_chunks = NUM2SIZET(max_buffer_bytes) / sizeof(gvls_chunk);
    if (max_chunks < 8) rb_raise(rb_eArgError, "buffer too small: at least %zu bytes", 8 * sizeof(gvls_chunk));
    Check_Type(threads, T_ARRAY);
    for (long i = 0; i < RARRAY_LEN(threads); i++) gvls_thread_for(RARRAY_AREF(threads, i));

    gvls_trace_buffers_reset(max_chunks);
    R.window_ns = NUM2ULL(window_ns);
    R.max_kept = max_chunks * 3 / 4;
    R.timeslice_us = NUM2UINT(timeslice_us);
    R.head = R.tail = NULL;
    R.kept = 0;
    T.start_ns = gvls_now_ns();
    R.start_realtime_ns = gvls_realtime_ns();
    R.keeper_stop = 0;
    int err = pthread_create(&R.keeper, NULL, keeper_main, NULL);
    if (err) { errno = err; rb_sys_fail("pthread_create (gvlscope flight recorder)"); }
    R.keeper_running = 1;
    R.on = 1;
    atomic_store(&T.active, 1);
    gvls_hook_install();
    return Qnil;
}

static VALUE flight_stop(VALUE self) {
    if (!R.on) rb_raise(rb_eRuntimeError, "the flight recorder is not running");
    if (R.dumping) rb_raise(rb_eRuntimeError, "a dump is being written");
    atomic_store(&T.active, 0);
    gvls_hook_remove();   // waits for callbacks in flight: nobody appends after this
    gvls_hook_sync();     // back on if metrics need it
    pthread_mutex_lock(&T.lock);
    R.keeper_stop = 1;
    pthread_cond_signal(&T.wake_writer);
    pthread_mutex_unlock(&T.lock);
    pthread_join(R.keeper, NULL);  // it never blocks but on T.lock: joining with the GVL is fine
    R.keeper_running = 0;
    free_list(gvls_trace_take_queue());
    free_list(R.head);
    R.head = R.tail = NULL;
    R.kept = 0;
    gvls_trace_buffers_free();
    R.on = 0;
    gvls_threads_prune_exited();
    return Qnil;
}

typedef struct {
    int fd;
    gvls_chunk *pinned;      // the ring's chunks, taken out while they are written
    gvls_chunk *partials;    // copies of the lanes' current chunks
    uint64_t cutoff_ns;      // absolute: the dump starts here
    uint64_t end_ns;         // absolute
    uint64_t events, dropped;
    int err;
} dump_job;

// Writes the records of one chunk at or after the cutoff, rebased so the chunk starts at its
// first kept record (deltas only shrink, so they still fit).
static int write_trimmed(dump_job *job, const gvls_chunk *chunk, uint64_t *scratch) {
    uint32_t count = chunk->header.count, first = 0;
    uint64_t base_abs = T.start_ns + chunk->header.base_ns;
    while (first < count && base_abs + (chunk->records[first] >> GVLS_RECORD_DELTA_SHIFT) < job->cutoff_ns) first++;
    uint32_t kept = count - first;
    if (kept == 0) return 0;  // drops before an aged-out chunk belong to the past as well
    uint64_t shift = chunk->records[first] >> GVLS_RECORD_DELTA_SHIFT;
    for (uint32_t i = 0; i < kept; i++) scratch[i] = chunk->records[first + i] - (shift << GVLS_RECORD_DELTA_SHIFT);
    gvls_events_header header = chunk->header;
    header.base_ns = base_abs + shift - job->cutoff_ns;
    header.count = kept;
    gvls_chunk_header head = { GVLS_CHUNK_EVENTS, (uint32_t)(sizeof(header) + kept * sizeof(uint64_t)) };
    int err = gvls_write_all(job->fd, &head, sizeof(head));
    if (!err) err = gvls_write_all(job->fd, &header, sizeof(header));
    if (!err) err = gvls_write_all(job->fd, scratch, kept * sizeof(uint64_t));
    job->events += kept;
    job->dropped += header.dropped_before;
    return err;
}

static void *write_events_without_gvl(void *arg) {
    dump_job *job = arg;
    uint64_t *scratch = malloc(sizeof(((gvls_chunk *)0)->records));
    if (!scratch) { job->err = ENOMEM; return NULL; }
    job->err = gvls_write_file_header(job->fd, job->cutoff_ns,
                                      R.start_realtime_ns + (job->cutoff_ns - T.start_ns), R.timeslice_us);
    for (gvls_chunk *chunk = job->pinned; chunk && !job->err; chunk = chunk->next) job->err = write_trimmed(job, chunk, scratch);
    for (gvls_chunk *chunk = job->partials; chunk && !job->err; chunk = chunk->next) job->err = write_trimmed(job, chunk, scratch);
    free(scratch);
    return NULL;
}

// Under T.lock. A lane's chunk is appended to by its owner without the lock, but only past
// `count` (published with a release store), and it is swapped only under the lock: the first
// `count` records can be copied safely now.
static gvls_chunk *copy_partial_chunks_locked(void) {
    gvls_chunk *copies = NULL;
    for (gvls_lane *lane = T.lanes; lane; lane = lane->next) {
        gvls_chunk *chunk = lane->chunk;
        if (!chunk) continue;
        uint32_t count = __atomic_load_n(&chunk->header.count, __ATOMIC_ACQUIRE);
        if (count == 0) continue;
        gvls_chunk *copy = malloc(offsetof(gvls_chunk, records) + count * sizeof(uint64_t));
        if (!copy) continue;
        copy->header = chunk->header;
        copy->header.count = count;
        memcpy(copy->records, chunk->records, count * sizeof(uint64_t));
        copy->next = copies;
        copies = copy;
    }
    return copies;
}

// Native.flight_dump(path) -> [events, dropped, duration_ns]
static VALUE flight_dump(VALUE self, VALUE path) {
    if (!R.on) rb_raise(rb_eRuntimeError, "the flight recorder is not running");
    if (R.dumping) rb_raise(rb_eRuntimeError, "a dump is already being written");
    FilePathValue(path);
    int fd = open(StringValueCStr(path), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) rb_sys_fail_str(path);

    dump_job job = { .fd = fd };
    R.dumping = 1;
    pthread_mutex_lock(&T.lock);
    job.end_ns = gvls_now_ns();
    job.cutoff_ns = job.end_ns > T.start_ns + R.window_ns ? job.end_ns - R.window_ns : T.start_ns;
    job.pinned = R.head;   // the keeper adds newer chunks to an empty ring meanwhile
    R.head = R.tail = NULL;
    R.kept = 0;
    job.partials = copy_partial_chunks_locked();
    pthread_mutex_unlock(&T.lock);

    // Up to the whole buffer (tens of MiB) to write: let other threads run meanwhile.
    rb_thread_call_without_gvl(write_events_without_gvl, &job, NULL, NULL);

    int err = job.err;
    if (!err) err = gvls_write_thread_table(fd);
    if (!err) {
        gvls_end_record end = { job.end_ns - job.cutoff_ns, job.events, job.dropped };
        gvls_chunk_header header = { GVLS_CHUNK_END, sizeof(end) };
        err = gvls_write_all(fd, &header, sizeof(header));
        if (!err) err = gvls_write_all(fd, &end, sizeof(end));
    }
    if (close(fd) != 0 && !err) err = errno;

    // The pinned chunks are older than anything kept since: they go back in front.
    pthread_mutex_lock(&T.lock);
    gvls_chunk *newer = R.head;
    size_t newer_count = R.kept;
    R.head = R.tail = NULL;
    R.kept = 0;
    keep_locked(job.pinned);
    R.kept += newer_count;
    if (newer) {
        if (R.tail) R.tail->next = newer; else R.head = newer;
        for (R.tail = newer; R.tail->next; R.tail = R.tail->next) {}
    }
    evict_locked(gvls_now_ns());
    pthread_mutex_unlock(&T.lock);
    free_list(job.partials);
    R.dumping = 0;

    if (err) { errno = err; rb_sys_fail_str(path); }
    return rb_ary_new_from_args(3, ULL2NUM(job.events), ULL2NUM(job.dropped), ULL2NUM(job.end_ns - job.cutoff_ns));
}

static VALUE flight_active_p(VALUE self) {
    return R.on ? Qtrue : Qfalse;
}

// In a forked child the keeper thread is gone and the ring holds the parent's past: free it.
// (trace_session.c's after_fork then frees the lanes and resets T.)
void gvls_flight_recorder_after_fork(void) {
    if (!R.on) return;
    free_list(R.head);
    R.head = R.tail = NULL;
    R.kept = 0;
    R.keeper_running = 0;
    R.dumping = 0;
    R.on = 0;
}

void gvls_flight_recorder_init(VALUE mNative) {
    rb_define_singleton_method(mNative, "flight_start", flight_start, 4);
    rb_define_singleton_method(mNative, "flight_stop", flight_stop, 0);
    rb_define_singleton_method(mNative, "flight_dump", flight_dump, 1);
    rb_define_singleton_method(mNative, "flight_active?", flight_active_p, 0);
}
