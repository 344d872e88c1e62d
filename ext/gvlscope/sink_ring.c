// The ring sink, or flight recorder: the trace's lanes (trace_buffer.c) as usual, but sealed
// chunks are kept in memory instead of written, and chunks older than the window (or past the
// byte budget) are freed. dump(path) writes what is kept, plus a copy of every lane's partly
// filled chunk, as a normal .gvl file starting at the window's start. The hook is untouched: it
// appends to lanes exactly as for a file trace, so recording costs the same and nothing stops
// while a dump is written.
#include "gvlscope.h"
#include "clock.h"
#include "trace_framing.h"
#include "trace_session.h"
#include "stacks.h"
#include <errno.h>
#include <unistd.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define T gvls_current_trace

static struct {
    gvls_chunk *head, *tail;   // sealed chunks kept, oldest first; under T.lock
    size_t kept, max_kept;     // bytes of chunks
    uint64_t lost;             // events of the window evicted for the byte budget: the next dump's drops
    uint64_t window_ns;
    uint64_t start_realtime_ns;
    uint32_t timeslice_us;
    int dumping;               // one dump at a time (the GVL serialises callers)
} R;

static size_t chunk_bytes(const gvls_chunk *chunk) {
    return chunk->compact ? offsetof(gvls_chunk, records) + chunk->header.count * sizeof(uint64_t) : sizeof(gvls_chunk);
}

static uint64_t chunk_last_abs_ns(const gvls_chunk *chunk) {
    uint32_t count = chunk->header.count;
    uint64_t delta = count ? gvls_record_delta(chunk->records[count - 1]) : 0;
    return T.start_ns + chunk->header.base_ns + delta;
}

// Under T.lock. Frees (to the pool) the oldest chunks while the ring is over budget or they end
// before the window. Lanes then always find spare chunks: the ring keeps at most 3/4 of the pool.
static void evict_locked(uint64_t now_ns) {
    uint64_t cutoff = now_ns > R.window_ns ? now_ns - R.window_ns : 0;
    while (R.head && (R.kept > R.max_kept || chunk_last_abs_ns(R.head) < cutoff)) {
        gvls_chunk *old = R.head;
        // Over budget, not aged out: events the window should hold are lost, and a dump says so.
        if (chunk_last_abs_ns(old) >= cutoff) R.lost += old->header.count + old->header.dropped_before;
        R.head = old->next;
        if (!R.head) R.tail = NULL;
        R.kept -= chunk_bytes(old);
        if (old->compact) free(old); else gvls_trace_recycle(old);
    }
}

static void keep_locked(gvls_chunk *list) {
    for (gvls_chunk *chunk = list, *next; chunk; chunk = next) {
        next = chunk->next;
        chunk->next = NULL;
        if (R.tail) R.tail->next = chunk; else R.head = chunk;
        R.tail = chunk;
        R.kept += chunk_bytes(chunk);
    }
}

// On the drain thread: sealed chunks go into the ring, the oldest out. Nothing back to the pool
// here: evicting (and compacting) gives chunks back itself.
// A chunk sealed early (its thread exited, or the trace's time ran past a chunk's range) may hold a
// few records in 64 KiB: kept as is, a few such would fill the ring. Copied to its size instead,
// and the chunk goes back to the pool. Not in the hook: the drain thread may allocate.
static gvls_chunk *compact(gvls_chunk *chunk, gvls_chunk **to_pool) {
    if (chunk->header.count >= GVLS_RECORDS_PER_CHUNK / 4) return chunk;
    gvls_chunk *copy = malloc(offsetof(gvls_chunk, records) + chunk->header.count * sizeof(uint64_t));
    if (!copy) return chunk;
    memcpy(&copy->header, &chunk->header, sizeof(copy->header));
    static const int yes = 1;  // memcpy: GCC's -Warray-bounds objects to a member store into a short gvls_chunk
    memcpy((char *)copy + offsetof(gvls_chunk, compact), &yes, sizeof(yes));
    memcpy(copy->records, chunk->records, chunk->header.count * sizeof(uint64_t));
    chunk->next = *to_pool;
    *to_pool = chunk;
    return copy;
}

static gvls_chunk *ring_consume(gvls_chunk *batch) {
    gvls_chunk *kept = NULL, **tail = &kept, *to_pool = NULL;
    for (gvls_chunk *chunk = batch, *next; chunk; chunk = next) {
        next = chunk->next;
        *tail = compact(chunk, &to_pool);
        tail = &(*tail)->next;
    }
    *tail = NULL;
    batch = kept;
    pthread_mutex_lock(&T.lock);
    for (gvls_chunk *chunk = to_pool, *next; chunk; chunk = next) { next = chunk->next; gvls_trace_recycle(chunk); }
    keep_locked(batch);
    evict_locked(gvls_now_ns());
    pthread_mutex_unlock(&T.lock);
    return NULL;
}

// Also the after-fork reset: the ring holds the parent's past (the lanes are freed by the session).
static void ring_free(void) {
    gvls_chunks_free(R.head);
    R.head = R.tail = NULL;
    R.kept = 0;
    R.dumping = 0;
}

static VALUE ring_finish(uint64_t end_ns) {
    ring_free();
    return Qnil;
}

static const gvls_sink ring_sink = {
    .consume = ring_consume,
    .drain_can_block = 0,
    .finish = ring_finish,
    .after_fork = ring_free,
};

// Native.flight_start(window_ns, max_buffer_bytes, timeslice_us, threads_already_running, stacks)
static VALUE flight_start(VALUE self, VALUE window_ns, VALUE max_buffer_bytes, VALUE timeslice_us, VALUE threads, VALUE stacks) {
    gvls_session_check_idle();
    size_t max_chunks = gvls_session_check_args(max_buffer_bytes, 8, threads);
    R.window_ns = NUM2ULL(window_ns);
    R.max_kept = max_chunks * 3 / 4 * sizeof(gvls_chunk);
    R.timeslice_us = NUM2UINT(timeslice_us);
    R.head = R.tail = NULL;
    R.kept = 0;
    R.lost = 0;
    uint64_t start_ns = gvls_now_ns();
    R.start_realtime_ns = gvls_realtime_ns();
    int err = gvls_session_start(&ring_sink, threads, max_chunks, start_ns, RTEST(stacks));
    if (err) { errno = err; rb_sys_fail(err == ENOMEM ? "gvlscope stack tables" : "pthread_create (gvlscope flight recorder)"); }
    return Qnil;
}

static VALUE flight_stop(VALUE self) {
    if (!gvls_session_running(&ring_sink)) rb_raise(rb_eRuntimeError, "the flight recorder is not running");
    if (R.dumping) rb_raise(rb_eRuntimeError, "a dump is being written");
    gvls_session_stop();
    return Qnil;
}

typedef struct {
    gvls_out out;
    gvls_chunk *pinned;      // the ring's chunks, taken out while they are written
    gvls_chunk *partials;    // copies of the lanes' current chunks
    uint64_t cutoff_ns;      // absolute: the dump starts here
    uint64_t end_ns;         // absolute
    uint64_t records, dropped;
    uint64_t events;         // of records: the GVL events (what `gvlscope report` counts), not ARG/SAMPLE
    uint32_t flags;          // GVLS_FILE_*
    int err;
} dump_job;

static int write_chunks(dump_job *job, const gvls_chunk *chunk, uint64_t *scratch) {
    int err = 0;
    for (; chunk && !err; chunk = chunk->next) {
        uint32_t kept;
        err = gvls_write_events_since(&job->out, &chunk->header, chunk->records, T.start_ns + chunk->header.base_ns,
                                      job->cutoff_ns, scratch, &kept);
        if (!kept) continue;
        job->records += kept;
        for (uint32_t i = chunk->header.count - kept; i < chunk->header.count; i++) {
            if (gvls_record_kind(chunk->records[i]) < GVLS_EV_ARG) job->events++;
        }
        job->dropped += chunk->header.dropped_before;
    }
    return err;
}

static void *write_events_without_gvl(void *arg) {
    dump_job *job = arg;
    gvls_session_test_nogvl_delay();
    uint64_t *scratch = malloc(sizeof(((gvls_chunk *)0)->records));
    if (!scratch) { job->err = ENOMEM; return NULL; }
    job->err = gvls_write_file_header(&job->out, job->cutoff_ns,
                                      R.start_realtime_ns + (job->cutoff_ns - T.start_ns), R.timeslice_us,
                                      job->flags);
    if (!job->err) job->err = write_chunks(job, job->pinned, scratch);
    if (!job->err) job->err = write_chunks(job, job->partials, scratch);
    free(scratch);
    return NULL;
}

static VALUE write_events_interruptibly(VALUE job) {
    rb_thread_call_without_gvl(write_events_without_gvl, (void *)job, NULL, NULL);
    return Qnil;
}

typedef struct { dump_job *job; gvls_end_record *end; int err; } finish_job;

static VALUE finish_dump_file(VALUE arg) {
    finish_job *finish = (finish_job *)arg;
    finish->err = gvls_finish_file(&finish->job->out, finish->job->err, gvls_write_stacks_chunk, finish->end);
    return Qnil;
}

// Native.flight_dump(path) -> [events, dropped, duration_ns, records]: records also counts ARG/SAMPLE records
// (the end record's count); events, the GVL events alone. A write that failed removes the file.
static VALUE flight_dump(VALUE self, VALUE path) {
    if (!gvls_session_running(&ring_sink)) rb_raise(rb_eRuntimeError, "the flight recorder is not running");
    if (R.dumping) rb_raise(rb_eRuntimeError, "a dump is already being written");
    FilePathValue(path);
    dump_job job = { .out = gvls_open_trace_file(path), .flags = gvls_stacks_active() ? GVLS_FILE_STACKS : 0 };
    R.dumping = 1;
    pthread_mutex_lock(&T.lock);
    job.end_ns = gvls_now_ns();
    job.cutoff_ns = job.end_ns > T.start_ns + R.window_ns ? job.end_ns - R.window_ns : T.start_ns;
    job.pinned = R.head;   // the drain thread adds newer chunks to an empty ring meanwhile
    R.head = R.tail = NULL;
    size_t pinned_bytes = R.kept;
    R.kept = 0;
    job.partials = gvls_trace_copy_lanes_locked();
    // Drops no chunk written here reports: lanes that found no chunk, the window's evicted chunks.
    job.dropped = gvls_trace_pending_drops_locked() + R.lost;
    R.lost = 0;
    pthread_mutex_unlock(&T.lock);

    // Up to the whole buffer (tens of MiB) to write: let other threads run meanwhile. The wait
    // always finishes (no unblock function), but an interrupt is raised as it returns: caught, so
    // the ring gets its chunks back and the file is finished; raised after, as stop does.
    int state = 0, finish_state = 0;
    rb_protect(write_events_interruptibly, (VALUE)&job, &state);
    VALUE errinfo = state ? rb_errinfo() : Qnil;
    rb_set_errinfo(Qnil);

    gvls_end_record end = { job.end_ns - job.cutoff_ns, job.records, job.dropped };
    gvls_session_machine(&end.cpus, &end.load_max_milli);
    finish_job finish = { &job, &end, 0 };
    rb_protect(finish_dump_file, (VALUE)&finish, &finish_state);
    gvls_out_close(&job.out);  // finishing raised before it closed the file (else: fd -1, nothing to do)

    // The pinned chunks are older than anything kept since: they go back in front.
    pthread_mutex_lock(&T.lock);
    gvls_chunk *newer = R.head;
    size_t newer_bytes = R.kept;
    R.head = R.tail = NULL;
    R.kept = 0;
    keep_locked(job.pinned);
    R.kept = pinned_bytes + newer_bytes;
    if (newer) {
        if (R.tail) R.tail->next = newer; else R.head = newer;
        for (R.tail = newer; R.tail->next; R.tail = R.tail->next) {}
    }
    evict_locked(gvls_now_ns());
    pthread_mutex_unlock(&T.lock);
    gvls_chunks_free(job.partials);
    R.dumping = 0;

    // A full disk (or finishing raised): no partial file left to pass for a dump, nor counted toward keep:.
    if (finish_state || finish.err) unlink(RSTRING_PTR(path));
    if (state) { rb_set_errinfo(errinfo); rb_jump_tag(state); }
    if (finish_state) rb_jump_tag(finish_state);
    if (finish.err == GVLS_ERR_NOT_OURS) rb_syserr_fail_str(EBADF, rb_sprintf("%"PRIsVALUE": %s", path, gvls_write_strerror(finish.err)));
    if (finish.err) { errno = finish.err; rb_sys_fail_str(path); }
    return rb_ary_new_from_args(4, ULL2NUM(job.events), ULL2NUM(job.dropped), ULL2NUM(end.end_ns), ULL2NUM(job.records));
}

static VALUE flight_active_p(VALUE self) {
    return gvls_session_running(&ring_sink) ? Qtrue : Qfalse;
}

void gvls_sink_ring_init(VALUE mNative) {
    rb_define_singleton_method(mNative, "flight_start", flight_start, 5);
    rb_define_singleton_method(mNative, "flight_stop", flight_stop, 0);
    rb_define_singleton_method(mNative, "flight_dump", flight_dump, 1);
    rb_define_singleton_method(mNative, "flight_active?", flight_active_p, 0);
}
