// The file sink: a trace written to a .gvl file as it runs. The drain thread writes sealed chunks
// so memory stays bounded however long the trace runs; stop adds the thread table and end record.
#include "gvlscope.h"
#include "clock.h"
#include "trace_framing.h"
#include "trace_session.h"
#include <errno.h>
#include <string.h>
#include <unistd.h>

#define T gvls_current_trace

static struct {
    int fd;
    int write_errno;   // the first failed write; written by the drain thread, read after it stopped
} F = { .fd = -1 };

// On the drain thread: never touches Ruby, only calls write(2). After a failed write the rest is
// not written but counted as dropped: recorded, then lost, not silently.
static gvls_chunk *file_consume(gvls_chunk *batch) {
    for (gvls_chunk *chunk = batch; chunk; chunk = chunk->next) {
        if (!F.write_errno) F.write_errno = gvls_write_events(F.fd, &chunk->header, chunk->records);
        if (F.write_errno) {
            pthread_mutex_lock(&T.lock);  // the counters are the lanes' too
            T.events_dropped += chunk->header.count;
            T.events_recorded -= chunk->header.count;
            pthread_mutex_unlock(&T.lock);
        }
    }
    return batch;
}

// -> [events, dropped, duration_ns, write_error_or_nil]
static VALUE file_finish(uint64_t end_ns) {
    gvls_end_record end = { end_ns - T.start_ns, T.events_recorded, T.events_dropped };
    int err = gvls_finish_file(F.fd, F.write_errno, &end);
    F.fd = -1;
    return rb_ary_new_from_args(4, ULL2NUM(end.events), ULL2NUM(end.dropped), ULL2NUM(end.end_ns),
                                err ? rb_str_new_cstr(strerror(err)) : Qnil);
}

// Also the after-fork reset: the parent writes its events; the child only lets go of the file.
static void file_close(void) {
    if (F.fd >= 0) close(F.fd);
    F.fd = -1;
}

static const gvls_sink file_sink = {
    .consume = file_consume,
    .drain_can_block = 1,
    .finish = file_finish,
    .after_fork = file_close,
};

// Native.trace_start(path, max_buffer_bytes, timeslice_us, threads_already_running, stacks)
static VALUE trace_start(VALUE self, VALUE path, VALUE max_buffer_bytes, VALUE timeslice_us, VALUE threads, VALUE stacks) {
    gvls_session_check_idle();
    FilePathValue(path);
    size_t max_chunks = gvls_session_check_args(max_buffer_bytes, 2, threads);
    int fd = gvls_open_trace_file(path);

    uint64_t start_ns = gvls_now_ns();
    int err = gvls_write_file_header(fd, start_ns, gvls_realtime_ns(), NUM2UINT(timeslice_us),
                                     RTEST(stacks) ? GVLS_FILE_STACKS : 0);
    if (err) { close(fd); errno = err; rb_sys_fail_str(path); }

    F.fd = fd;
    F.write_errno = 0;
    if ((err = gvls_session_start(&file_sink, threads, max_chunks, start_ns, RTEST(stacks)))) {
        file_close();
        errno = err;
        rb_sys_fail(err == ENOMEM ? "gvlscope stack tables" : "pthread_create (gvlscope trace writer)");
    }
    return Qnil;
}

// Native.trace_stop -> [events, dropped, duration_ns, write_error_or_nil]
static VALUE trace_stop(VALUE self) {
    // Not while the flight recorder (sink_ring.c) runs: it has its own stop.
    if (!gvls_session_running(&file_sink)) rb_raise(rb_eRuntimeError, "no trace is running");
    return gvls_session_stop();
}

void gvls_sink_file_init(VALUE mNative) {
    rb_define_singleton_method(mNative, "trace_start", trace_start, 5);
    rb_define_singleton_method(mNative, "trace_stop", trace_stop, 0);
}
