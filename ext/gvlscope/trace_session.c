// Starting and stopping a trace: the file, its header, thread table and end record, and the order
// of operations that makes stopping safe (hook off first, then flush, then the writer).
#include "gvlscope.h"
#include "clock.h"
#include "hook.h"
#include "metrics.h"
#include "thread_state.h"
#include "trace.h"
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define T gvls_current_trace

uint64_t gvls_realtime_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int gvls_write_file_header(int fd, uint64_t start_monotonic_ns, uint64_t start_realtime_ns, uint32_t timeslice_us) {
    gvls_file_header header = { .version = GVLS_FORMAT_VERSION, .header_bytes = sizeof(header) };
    memcpy(header.magic, GVLS_MAGIC, sizeof(header.magic));
    header.start_monotonic_ns = start_monotonic_ns;
    header.start_realtime_ns = start_realtime_ns;
    header.pid = (uint32_t)getpid();
    header.timeslice_us = timeslice_us;
    return gvls_write_all(fd, &header, sizeof(header));
}

// Native.trace_start(path, max_buffer_bytes, timeslice_us, threads_already_running)
static VALUE trace_start(VALUE self, VALUE path, VALUE max_buffer_bytes, VALUE timeslice_us, VALUE threads) {
    if (atomic_load(&T.active) || T.fd >= 0) rb_raise(rb_eRuntimeError, "a trace is already running");
    FilePathValue(path);
    size_t max_chunks = NUM2SIZET(max_buffer_bytes) / sizeof(gvls_chunk);
    if (max_chunks < 2) rb_raise(rb_eArgError, "buffer too small: at least %zu bytes", 2 * sizeof(gvls_chunk));
    Check_Type(threads, T_ARRAY);

    int fd = open(StringValueCStr(path), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) rb_sys_fail_str(path);

    uint64_t start_ns = gvls_now_ns();
    int err = gvls_write_file_header(fd, start_ns, gvls_realtime_ns(), NUM2UINT(timeslice_us));
    if (err) { close(fd); errno = err; rb_sys_fail_str(path); }

    // Threads that already exist get their slots now, so the table names them even if they
    // never fire an event during the trace.
    for (long i = 0; i < RARRAY_LEN(threads); i++) gvls_thread_for(RARRAY_AREF(threads, i));

    gvls_trace_buffers_reset(max_chunks);
    T.start_ns = start_ns;
    T.fd = fd;
    if ((err = gvls_trace_writer_start())) {
        T.fd = -1;
        close(fd);
        errno = err;
        rb_sys_fail("pthread_create (gvlscope trace writer)");
    }
    atomic_store(&T.active, 1);
    gvls_hook_install();
    return Qnil;
}

typedef struct { gvls_thread *copy; size_t len, capa; } thread_copies;

static void copy_thread(gvls_thread *slot, void *arg) {
    thread_copies *copies = arg;
    if (copies->len == copies->capa) {
        size_t capa = copies->capa ? copies->capa * 2 : 64;
        gvls_thread *grown = realloc(copies->copy, capa * sizeof(*grown));
        if (!grown) return;
        copies->copy = grown;
        copies->capa = capa;
    }
    copies->copy[copies->len++] = *slot;
}

// The thread table. Names are read now, at the end, so names given after a thread started are
// included. The registry is copied first: calling Ruby may run GC, whose mark takes its lock.
int gvls_write_thread_table(int fd) {
    thread_copies copies = { 0 };
    gvls_threads_each(copy_thread, &copies);
    VALUE buffer = rb_str_buf_new(64 * (long)copies.len);
    VALUE main_thread = rb_thread_main();
    ID id_name = rb_intern("name");
    for (size_t i = 0; i < copies.len; i++) {
        gvls_thread *slot = &copies.copy[i];
        VALUE name = rb_funcall(slot->thread, id_name, 0);
        if (!RB_TYPE_P(name, T_STRING)) name = rb_str_new(0, 0);
        gvls_thread_record record = {
            .serial = slot->serial,
            .ractor_id = slot->ractor_id,
            .flags = (slot->thread == main_thread ? GVLS_THREAD_MAIN : 0) | (slot->exited ? GVLS_THREAD_EXITED : 0),
            .name_bytes = (uint32_t)RSTRING_LEN(name),
        };
        rb_str_buf_cat(buffer, (const char *)&record, sizeof(record));
        rb_str_buf_cat(buffer, RSTRING_PTR(name), RSTRING_LEN(name));
    }
    free(copies.copy);
    gvls_chunk_header header = { GVLS_CHUNK_THREADS, (uint32_t)RSTRING_LEN(buffer) };
    int err = gvls_write_all(fd, &header, sizeof(header));
    if (!err) err = gvls_write_all(fd, RSTRING_PTR(buffer), RSTRING_LEN(buffer));
    RB_GC_GUARD(buffer);
    return err;
}

static void *stop_writer_without_gvl(void *unused) {
    gvls_trace_writer_stop();  // writes everything queued, then joins the writer
    return NULL;
}

// Native.trace_stop -> [events, dropped, duration_ns, write_error_or_nil]
static VALUE trace_stop(VALUE self) {
    // fd < 0: the flight recorder (flight_recorder.c) is what runs, and it has its own stop.
    if (!atomic_load(&T.active) || T.fd < 0) rb_raise(rb_eRuntimeError, "no trace is running");
    atomic_store(&T.active, 0);
    gvls_hook_remove();             // waits for callbacks in flight: nobody appends after this
    gvls_hook_sync();               // back on at once if metrics still need it (they write no lanes)
    uint64_t end_ns = gvls_now_ns();
    gvls_trace_buffers_flush();
    // The writer may be blocked on a slow disk or a pipe that a Ruby thread of this process
    // drains: wait for it without the GVL, or that thread could never run.
    rb_thread_call_without_gvl(stop_writer_without_gvl, NULL, NULL, NULL);

    int err = T.write_errno;
    if (!err) err = gvls_write_thread_table(T.fd);
    gvls_end_record end = { end_ns - T.start_ns, T.events_recorded, T.events_dropped };
    if (!err) {
        gvls_chunk_header header = { GVLS_CHUNK_END, sizeof(end) };
        err = gvls_write_all(T.fd, &header, sizeof(header));
        if (!err) err = gvls_write_all(T.fd, &end, sizeof(end));
    }
    if (close(T.fd) != 0 && !err) err = errno;
    T.fd = -1;
    gvls_trace_buffers_free();
    gvls_threads_prune_exited();
    return rb_ary_new_from_args(4, ULL2NUM(end.events), ULL2NUM(end.dropped), ULL2NUM(end.end_ns),
                                err ? rb_str_new_cstr(strerror(err)) : Qnil);
}

// Native.after_fork_in_child: the child inherits the parent's trace state but not its writer
// thread; it must not write into the parent's file. Drop the inherited trace (its buffered events
// belong to the parent, which writes them) and reset locks other threads may have held.
static VALUE after_fork_in_child(VALUE self) {
    gvls_thread_state_after_fork();
    pthread_mutex_init(&T.lock, NULL);
    pthread_cond_init(&T.wake_writer, NULL);
    int was_tracing = atomic_exchange(&T.active, 0);
    if (T.fd >= 0) { close(T.fd); T.fd = -1; }
    T.writer_running = 0;
    for (gvls_chunk *chunk = gvls_trace_take_queue(), *next; chunk; chunk = next) { next = chunk->next; free(chunk); }
    gvls_flight_recorder_after_fork();
    gvls_trace_buffers_free();
    gvls_metrics_after_fork();
    gvls_hook_sync();
    return was_tracing ? Qtrue : Qfalse;
}

static VALUE trace_active_p(VALUE self) {
    return atomic_load(&T.active) ? Qtrue : Qfalse;
}

void gvls_trace_session_init(VALUE mNative) {
    rb_define_singleton_method(mNative, "trace_start", trace_start, 4);
    rb_define_singleton_method(mNative, "trace_stop", trace_stop, 0);
    rb_define_singleton_method(mNative, "trace_active?", trace_active_p, 0);
    rb_define_singleton_method(mNative, "after_fork_in_child", after_fork_in_child, 0);
    gvls_flight_recorder_init(mNative);
}
