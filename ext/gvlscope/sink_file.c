// The file sink: a trace written to a .gvl file as it runs. The drain thread writes sealed chunks
// so memory stays bounded however long the trace runs; stop adds the thread table and end record.
#include "gvlscope.h"
#include "clock.h"
#include "thread_state.h"
#include "trace_framing.h"
#include "trace_session.h"
#include "stacks.h"
#include <ruby/debug.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define T gvls_current_trace
// A thread with no name yet when its record was written is looked at again by later runs of the
// records job, at most every RECHECK_EVERY_NS, until it is named or has been looked at
// NAME_RECHECKS times and RECHECK_FOR_NS have passed (then only the table at stop names it):
// bounded work per thread, and a name set just after Thread.new (the creator may hold the GVL
// for a while) is still seen.
#define NAME_RECHECKS 4
#define RECHECK_EVERY_NS 10000000ull
#define RECHECK_FOR_NS 500000000ull

typedef struct { gvls_thread *slot; unsigned tries; uint64_t since_ns; } unnamed_slot;

static struct {
    gvls_out out;
    int write_errno;   // the first failed write; written by the drain thread, read after it stopped
    // Thread records written as threads appear (records_job), so a killed process's trace is
    // labelled. The job's state is used with the GVL only.
    rb_postponed_job_handle_t records_job;
    _Atomic int live;         // a file trace records: a new slot is worth a job
    _Atomic int wanted;       // the job should run (again): the drain thread triggers it
    size_t registry_done;     // registry index up to which slots have their record written
    uint64_t rechecked_ns;    // when the unnamed were last looked at
    uint64_t epoch;           // bumped per reset: a job that called Ruby sees whether its trace is still the one
    unnamed_slot *unnamed;    // written without a name: looked at again
    size_t unnamed_len, unnamed_capa;
} F = { .out = { .fd = -1 }, .records_job = POSTPONED_JOB_HANDLE_INVALID };

static void file_sink_records_reset(void) {
    free(F.unnamed);
    F.unnamed = NULL;
    F.unnamed_len = F.unnamed_capa = 0;
    F.registry_done = 0;
    F.rechecked_ns = 0;
    F.epoch++;
    atomic_store(&F.wanted, 0);
}

// On the drain thread: never touches Ruby, only calls fstat(2) and write(2). After a failed write,
// or once the file is no longer at its descriptor (the program closed it), the rest is not
// written but counted as dropped: recorded, then lost, not silently. Thread records (a
// preformatted chunk from records_job) and CPU samples (from the drain thread) are written in
// queue order and freed here.
static gvls_chunk *file_consume(gvls_chunk *batch) {
    gvls_chunk *to_pool = NULL, **tail = &to_pool;
    for (gvls_chunk *chunk = batch, *next; chunk; chunk = next) {
        next = chunk->next;
        if (chunk->compact == GVLS_CHUNK_PREFORMATTED) {
            if (!F.write_errno) F.write_errno = gvls_write_all(&F.out, chunk->records, chunk->preformatted_bytes);
            free(chunk);
            continue;
        }
        if (!F.write_errno) F.write_errno = gvls_write_events(&F.out, &chunk->header, chunk->records);
        if (F.write_errno) {
            pthread_mutex_lock(&T.lock);  // the counters are the lanes' too
            T.events_dropped += chunk->header.count;
            T.events_recorded -= chunk->header.count;
            pthread_mutex_unlock(&T.lock);
        }
        *tail = chunk;
        tail = &chunk->next;
    }
    *tail = NULL;
    // Without an execution context the job goes to the main Ractor: also the way to it for a
    // slot a thread of another Ractor created (that Ractor's run of the job does nothing).
    if (atomic_load(&F.wanted)) rb_postponed_job_trigger(F.records_job);
    return to_pool;
}

// A thread got its slot (a listener of thread_state.c, maybe in the hook, any native thread): asks
// for its record to be written to the running trace file. No locks, no Ruby calls.
static void thread_appeared(void) {
    if (!atomic_load_explicit(&F.live, memory_order_relaxed)) return;
    atomic_store(&F.wanted, 1);
    rb_postponed_job_trigger(F.records_job);
}

typedef struct { gvls_thread **slot; size_t len, capa; } slot_list;

static void push_slot(gvls_thread *slot, void *arg) {
    slot_list *list = arg;
    if (list->len == list->capa) {
        size_t capa = list->capa ? list->capa * 2 : 16;
        gvls_thread **grown = realloc(list->slot, capa * sizeof(*grown));
        if (!grown) return;
        list->slot = grown;
        list->capa = capa;
    }
    list->slot[list->len++] = slot;
}

static void remember_unnamed(gvls_thread *slot, uint64_t now_ns) {
    if (F.unnamed_len == F.unnamed_capa) {
        size_t capa = F.unnamed_capa ? F.unnamed_capa * 2 : 16;
        unnamed_slot *grown = realloc(F.unnamed, capa * sizeof(*grown));
        if (!grown) return;
        F.unnamed = grown;
        F.unnamed_capa = capa;
    }
    F.unnamed[F.unnamed_len++] = (unnamed_slot){ slot, 0, now_ns };
}

static const gvls_sink file_sink;

// The postponed job (with the GVL; Ruby may be called): a THREADS chunk with the records of the
// slots that appeared since its last run, and of those written without a name that have one now.
// Why queued for the drain thread rather than written here: a write with the GVL could wait for
// the drain thread, blocked on a pipe that only a Ruby thread of this process empties.
// Slots stay valid: nothing prunes the registry while a trace records.
static void records_job(void *unused) {
    if (!gvls_session_running(&file_sink) || !gvls_on_main_ractor()) return;
    atomic_store(&F.wanted, 0);
    uint64_t epoch = F.epoch;
    slot_list list = { 0 };
    // Names awaited: only those given one since are written again.
    uint64_t now_ns = gvls_now_ns();
    size_t from_unnamed;
    if (F.unnamed_len && now_ns - F.rechecked_ns >= RECHECK_EVERY_NS) {
        F.rechecked_ns = now_ns;
        size_t kept = 0;
        for (size_t i = 0; i < F.unnamed_len; i++) {
            unnamed_slot entry = F.unnamed[i];
            gvls_thread_ref ref = gvls_thread_ref_of(entry.slot);
            VALUE name, site;
            gvls_thread_label(&ref, 0, &name, &site);
            if (F.epoch != epoch) { free(list.slot); return; }  // a Thread#name in Ruby let the trace stop
            if (RSTRING_LEN(name) > 0) push_slot(entry.slot, &list);
            else if ((++entry.tries < NAME_RECHECKS || now_ns - entry.since_ns < RECHECK_FOR_NS) &&
                     !atomic_load(&entry.slot->exited)) F.unnamed[kept++] = entry;
        }
        F.unnamed_len = kept;
    }
    from_unnamed = list.len;
    F.registry_done = gvls_threads_each_from(F.registry_done, push_slot, &list);
    if (list.len == 0) { free(list.slot); goto out; }

    gvls_thread_ref *refs = malloc(list.len * sizeof(*refs));
    uint8_t *named = malloc(list.len);
    if (!refs || !named) { free(refs); free(named); free(list.slot); goto out; }
    for (size_t i = 0; i < list.len; i++) refs[i] = gvls_thread_ref_of(list.slot[i]);
    VALUE bytes = gvls_thread_records_chunk(refs, list.len, named);
    // Reading names called Ruby, which may have let another thread stop the trace meanwhile.
    if (F.epoch != epoch || !gvls_session_running(&file_sink)) { free(refs); free(named); free(list.slot); return; }
    for (size_t i = from_unnamed; i < list.len; i++) {
        if (!named[i] && !refs[i].exited) remember_unnamed(list.slot[i], now_ns);
    }
    free(refs);
    free(named);
    free(list.slot);
    size_t len = (size_t)RSTRING_LEN(bytes);
    gvls_chunk *chunk = malloc(offsetof(gvls_chunk, records) + len);
    if (chunk) {
        memset(chunk, 0, offsetof(gvls_chunk, records));
        chunk->compact = GVLS_CHUNK_PREFORMATTED;
        chunk->preformatted_bytes = (uint32_t)len;
        memcpy(chunk->records, RSTRING_PTR(bytes), len);
        pthread_mutex_lock(&T.lock);
        gvls_trace_queue_locked(chunk);
        pthread_mutex_unlock(&T.lock);
    }
    RB_GC_GUARD(bytes);
out:
    if (F.unnamed_len) atomic_store(&F.wanted, 1);
}

// -> [events, dropped, duration_ns, write_error_or_nil]
static VALUE file_finish(uint64_t end_ns) {
    gvls_end_record end = { end_ns - T.start_ns, T.events_recorded, T.events_dropped };
    gvls_session_machine(&end.cpus, &end.load_max_milli);
    int err = gvls_finish_file(&F.out, F.write_errno, gvls_write_stacks_chunk, &end);
    file_sink_records_reset();
    return rb_ary_new_from_args(4, ULL2NUM(end.events), ULL2NUM(end.dropped), ULL2NUM(end.end_ns),
                                err ? rb_str_new_cstr(gvls_write_strerror(err)) : Qnil);
}

// Also the after-fork reset: the parent writes its events; the child only lets go of the file.
static void file_close(void) {
    atomic_store(&F.live, 0);
    gvls_out_close(&F.out);
    file_sink_records_reset();
}

static const gvls_sink file_sink = {
    .consume = file_consume,
    .drain_can_block = 1,
    .cpu_samples = 1,
    .finish = file_finish,
    .after_fork = file_close,
};

// Native.trace_start(path, max_buffer_bytes, timeslice_us, threads_already_running, stacks)
static VALUE trace_start(VALUE self, VALUE path, VALUE max_buffer_bytes, VALUE timeslice_us, VALUE threads, VALUE stacks) {
    gvls_session_check_idle();
    FilePathValue(path);
    size_t max_chunks = gvls_session_check_args(max_buffer_bytes, 2, threads);
    gvls_out out = gvls_open_trace_file(path);

    uint64_t start_ns = gvls_now_ns();
    int err = gvls_write_file_header(&out, start_ns, gvls_realtime_ns(), NUM2UINT(timeslice_us),
                                     RTEST(stacks) ? GVLS_FILE_STACKS : 0);
    if (err) { gvls_out_close(&out); errno = err; rb_sys_fail_str(path); }

    F.out = out;
    F.write_errno = 0;
    file_sink_records_reset();
    if ((err = gvls_session_start(&file_sink, threads, max_chunks, start_ns, RTEST(stacks)))) {
        file_close();
        errno = err;
        rb_sys_fail(err == ENOMEM ? "gvlscope stack tables" : "pthread_create (gvlscope trace writer)");
    }
    if (F.records_job != POSTPONED_JOB_HANDLE_INVALID) {
        atomic_store(&F.live, 1);
        thread_appeared();  // the threads that already have slots
    }
    return Qnil;
}

// Native.trace_stop -> [events, dropped, duration_ns, write_error_or_nil]
static VALUE trace_stop(VALUE self) {
    // Not while the flight recorder (sink_ring.c) runs: it has its own stop.
    if (!gvls_session_running(&file_sink)) rb_raise(rb_eRuntimeError, "no trace is running");
    atomic_store(&F.live, 0);
    return gvls_session_stop();
}

static void slot_created(gvls_thread *slot) {
    thread_appeared();
}

// The registry tells this sink of new slots: it is below the sinks and calls them by no name.
static const gvls_slot_listener slot_listener = { .created = slot_created };

void gvls_sink_file_init(VALUE mNative) {
    gvls_threads_listen(&slot_listener);
    // Preregistered once: triggering is then safe from the hook and the drain thread (3.3+).
    // Invalid (CRuby's job table full): thread records are then written at stop only.
    F.records_job = rb_postponed_job_preregister(0, records_job, NULL);
    rb_define_singleton_method(mNative, "trace_start", trace_start, 5);
    rb_define_singleton_method(mNative, "trace_stop", trace_stop, 0);
}
