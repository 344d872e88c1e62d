// The background writer: drains sealed chunks to the native file so memory stays bounded however
// long the trace runs. It never touches Ruby; it only calls write(2).
#include "trace.h"
#include <errno.h>
#include <string.h>
#include <unistd.h>

#define T gvls_current_trace

// write(2) until done; returns 0 or errno.
int gvls_write_all(int fd, const void *data, size_t bytes) {
    const char *p = data;
    while (bytes > 0) {
        ssize_t n = write(fd, p, bytes);
        if (n < 0) {
            if (errno == EINTR) continue;
            return errno;
        }
        p += n;
        bytes -= (size_t)n;
    }
    return 0;
}

static void write_chunk(gvls_chunk *chunk) {
    size_t record_bytes = chunk->header.count * sizeof(uint64_t);
    gvls_chunk_header header = { GVLS_CHUNK_EVENTS, (uint32_t)(sizeof(gvls_events_header) + record_bytes) };
    int err = 0;
    if (!T.write_errno) {
        // One buffer per chunk so a killed process leaves whole chunks or a detectably short one.
        char head[sizeof(header) + sizeof(gvls_events_header)];
        memcpy(head, &header, sizeof(header));
        memcpy(head + sizeof(header), &chunk->header, sizeof(gvls_events_header));
        err = gvls_write_all(T.fd, head, sizeof(head));
        if (!err) err = gvls_write_all(T.fd, chunk->records, record_bytes);
    }
    if (err || T.write_errno) {
        pthread_mutex_lock(&T.lock);
        if (!T.write_errno) T.write_errno = err;
        T.events_dropped += chunk->header.count;  // recorded, then lost: not silent
        T.events_recorded -= chunk->header.count;
        pthread_mutex_unlock(&T.lock);
    }
}

static void *writer_main(void *unused) {
    pthread_mutex_lock(&T.lock);
    for (;;) {
        gvls_chunk *batch = gvls_trace_take_queue();
        if (!batch) {
            if (T.writer_stop) break;
            pthread_cond_wait(&T.wake_writer, &T.lock);
            continue;
        }
        pthread_mutex_unlock(&T.lock);
        for (gvls_chunk *chunk = batch; chunk; chunk = chunk->next) write_chunk(chunk);
        pthread_mutex_lock(&T.lock);
        for (gvls_chunk *chunk = batch, *next; chunk; chunk = next) {
            next = chunk->next;
            gvls_trace_recycle(chunk);
        }
    }
    pthread_mutex_unlock(&T.lock);
    return NULL;
}

int gvls_trace_writer_start(void) {
    T.writer_stop = 0;
    T.write_errno = 0;
    int err = pthread_create(&T.writer, NULL, writer_main, NULL);
    T.writer_running = (err == 0);
    return err;
}

void gvls_trace_writer_stop(void) {
    if (!T.writer_running) return;
    pthread_mutex_lock(&T.lock);
    T.writer_stop = 1;
    pthread_cond_signal(&T.wake_writer);
    pthread_mutex_unlock(&T.lock);
    pthread_join(T.writer, NULL);
    T.writer_running = 0;
}
