// Writing the .gvl framing: see trace_framing.h and format.h.
#include "trace_framing.h"
#include "thread_state.h"
#include <errno.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

uint64_t gvls_realtime_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

// Where a trace's descriptor goes: above the numbers a program's own files get (the lowest free),
// below the common limit of 1024 (a program's select(2) and the kernel's descriptor table stay small).
#define HIGH_FD_FLOOR 900

static int move_high(int fd) {
    int floor = HIGH_FD_FLOOR;
    struct rlimit limit;
    if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur <= (rlim_t)floor) {
        floor = (int)(limit.rlim_cur / 2);
    }
    if (fd >= floor) return fd;
    int high = fcntl(fd, F_DUPFD_CLOEXEC, floor);
    if (high < 0) return fd;  // no room up there: it stays, checked before each write all the same
    close(fd);
    return high;
}

gvls_out gvls_open_trace_file(VALUE path) {
    int fd = open(StringValueCStr(path), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644); /* never overwrite a file nor write through a symlink */
    if (fd < 0) rb_sys_fail_str(path);
    fd = move_high(fd);
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int err = errno;
        close(fd);
        unlink(StringValueCStr(path));
        errno = err;
        rb_sys_fail_str(path);
    }
    return (gvls_out){ .fd = fd, .dev = st.st_dev, .ino = st.st_ino };
}

int gvls_out_check(const gvls_out *out) {
    struct stat st;
    if (out->fd < 0 || fstat(out->fd, &st) != 0 || st.st_dev != out->dev || st.st_ino != out->ino) return GVLS_ERR_NOT_OURS;
    return 0;
}

int gvls_out_close(gvls_out *out) {
    int err = 0;
    if (gvls_out_check(out) == 0 && close(out->fd) != 0) err = errno;
    out->fd = -1;
    return err;
}

const char *gvls_write_strerror(int err) {
    if (err == GVLS_ERR_NOT_OURS) {
        return "the program closed the trace's file descriptor (its number may now be one of its own files): "
               "the trace stopped there, nothing more was written";
    }
    return strerror(err);
}

// write(2) until done, if out is still the file opened; returns 0 or an errno (GVLS_ERR_NOT_OURS).
int gvls_write_all(const gvls_out *out, const void *data, size_t bytes) {
    const char *p = data;
    int err = gvls_out_check(out);
    if (err) return err;
    while (bytes > 0) {
        ssize_t n = write(out->fd, p, bytes);
        if (n < 0) {
            if (errno == EINTR) continue;
            return errno;
        }
        p += n;
        bytes -= (size_t)n;
    }
    return 0;
}

int gvls_write_file_header(const gvls_out *out, uint64_t start_monotonic_ns, uint64_t start_realtime_ns,
                           uint32_t timeslice_us, uint32_t flags) {
    gvls_file_header header = { .version = GVLS_FORMAT_VERSION, .header_bytes = sizeof(header) };
    memcpy(header.magic, GVLS_MAGIC, sizeof(header.magic));
    header.start_monotonic_ns = start_monotonic_ns;
    header.start_realtime_ns = start_realtime_ns;
    header.pid = (uint32_t)getpid();
    header.timeslice_us = timeslice_us;
    header.flags = flags;
    return gvls_write_all(out, &header, sizeof(header));
}

int gvls_write_events(const gvls_out *out, const gvls_events_header *header, const uint64_t *records) {
    size_t record_bytes = header->count * sizeof(uint64_t);
    gvls_chunk_header chunk = { GVLS_CHUNK_EVENTS, (uint32_t)(sizeof(*header) + record_bytes) };
    // Both headers in one write(2), so a killed process leaves whole chunks or a detectably short one.
    char head[sizeof(chunk) + sizeof(*header)];
    memcpy(head, &chunk, sizeof(chunk));
    memcpy(head + sizeof(chunk), header, sizeof(*header));
    int err = gvls_write_all(out, head, sizeof(head));
    if (!err) err = gvls_write_all(out, records, record_bytes);
    return err;
}

int gvls_write_events_since(const gvls_out *out, const gvls_events_header *header, const uint64_t *records, uint64_t base_abs_ns,
                            uint64_t cutoff_ns, uint64_t *scratch, uint32_t *kept) {
    uint32_t count = header->count, first = 0;
    while (first < count && base_abs_ns + gvls_record_delta(records[first]) < cutoff_ns) first++;
    *kept = count - first;
    if (*kept == 0) return 0;  // drops before an aged-out chunk belong to the past as well
    // Deltas only shrink, so they still fit.
    uint64_t shift = gvls_record_delta(records[first]);
    for (uint32_t i = 0; i < *kept; i++) {
        uint64_t record = records[first + i];
        scratch[i] = gvls_record(gvls_record_kind(record), gvls_record_value(record), gvls_record_delta(record) - shift);
    }
    gvls_events_header rebased = *header;
    rebased.base_ns = base_abs_ns + shift - cutoff_ns;
    rebased.count = *kept;
    return gvls_write_events(out, &rebased, scratch);
}

typedef struct { gvls_thread_ref *ref; size_t len, capa; } thread_refs;

static void ref_thread(gvls_thread *slot, void *arg) {
    thread_refs *refs = arg;
    if (refs->len == refs->capa) {
        size_t capa = refs->capa ? refs->capa * 2 : 64;
        gvls_thread_ref *grown = realloc(refs->ref, capa * sizeof(*grown));
        if (!grown) return;
        refs->ref = grown;
        refs->capa = capa;
    }
    refs->ref[refs->len++] = gvls_thread_ref_of(slot);
}

typedef struct { const gvls_thread_ref *refs; size_t len; uint8_t *named; } records_args;

static VALUE build_records(VALUE arg) {
    const records_args *args = (const records_args *)arg;
    VALUE buffer = rb_str_buf_new(sizeof(gvls_chunk_header) + 64 * (long)args->len);
    rb_str_buf_cat(buffer, (const char *)&(gvls_chunk_header){ GVLS_CHUNK_THREADS, 0 }, sizeof(gvls_chunk_header));
    VALUE main_thread = rb_thread_main();
    for (size_t i = 0; i < args->len; i++) {
        const gvls_thread_ref *ref = &args->refs[i];
        VALUE name, site;
        gvls_thread_label(ref, 1, &name, &site);
        if (args->named) args->named[i] = RSTRING_LEN(name) > 0;
        gvls_thread_record record = {
            .serial = ref->serial,
            .ractor_id = ref->ractor_id,
            .flags = (ref->thread == main_thread ? GVLS_THREAD_MAIN : 0) | (ref->exited ? GVLS_THREAD_EXITED : 0),
            .name_bytes = (uint32_t)RSTRING_LEN(name),
            .created_at_bytes = (uint32_t)RSTRING_LEN(site),
        };
        rb_str_buf_cat(buffer, (const char *)&record, sizeof(record));
        rb_str_buf_cat(buffer, RSTRING_PTR(name), RSTRING_LEN(name));
        rb_str_buf_cat(buffer, RSTRING_PTR(site), RSTRING_LEN(site));
    }
    gvls_chunk_header header = { GVLS_CHUNK_THREADS, (uint32_t)(RSTRING_LEN(buffer) - sizeof(header)) };
    memcpy(RSTRING_PTR(buffer), &header, sizeof(header));
    return buffer;
}

static VALUE resume_releases(VALUE unused) {
    gvls_threads_release_pause(0);
    return Qnil;
}

VALUE gvls_thread_records_chunk(const gvls_thread_ref *refs, size_t len, uint8_t *named) {
    records_args args = { refs, len, named };
    gvls_threads_release_pause(1);  // refs' Threads stay marked while their names are read
    return rb_ensure(build_records, (VALUE)&args, resume_releases, Qnil);  // a failed allocation raises
}

// The thread table. Names are read now, at the end, so names given after a thread started are
// included. The registry is copied first: calling Ruby may run GC, whose mark takes its lock.
static int write_thread_table(const gvls_out *out) {
    thread_refs refs = { 0 };
    gvls_threads_each(ref_thread, &refs);
    VALUE buffer = gvls_thread_records_chunk(refs.ref, refs.len, NULL);
    free(refs.ref);
    int err = gvls_write_all(out, RSTRING_PTR(buffer), RSTRING_LEN(buffer));
    RB_GC_GUARD(buffer);
    return err;
}

int gvls_finish_file(gvls_out *out, int err, int (*write_more)(const gvls_out *out), const gvls_end_record *end) {
    if (!err) err = write_thread_table(out);
    if (!err && write_more) err = write_more(out);
    if (!err) {
        gvls_chunk_header header = { GVLS_CHUNK_END, sizeof(*end) };
        err = gvls_write_all(out, &header, sizeof(header));
        if (!err) err = gvls_write_all(out, end, sizeof(*end));
    }
    int close_err = gvls_out_close(out);
    return err ? err : close_err;
}
