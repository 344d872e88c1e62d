// Consumer 2, the trace: per-native-thread event buffers (trace_buffer.c) drained to the native
// file by a background writer (trace_writer.c).
#ifndef GVLSCOPE_TRACE_H
#define GVLSCOPE_TRACE_H

#include "gvlscope.h"
#include "format.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define GVLS_RECORDS_PER_CHUNK 8192  // 64 KiB of records: one write(2) per 8192 events

typedef struct gvls_chunk {
    struct gvls_chunk *next;   // in the writer's queue or the free list
    gvls_events_header header;
    uint64_t records[GVLS_RECORDS_PER_CHUNK];
} gvls_chunk;

// Everything one native thread records during a trace. Only that native thread appends to it,
// so appending needs no lock; the lock is taken only to hand a full chunk to the writer.
typedef struct gvls_lane {
    struct gvls_lane *next;    // all lanes of the trace, to flush them at stop
    gvls_chunk *chunk;         // being filled; NULL while no chunk could be had (events dropped)
    uint64_t base_abs_ns;      // absolute time of the chunk's base_ns
    uint32_t native_serial;
    uint32_t native_tid;
    uint32_t dropped;          // dropped since the last chunk: goes into the next chunk's header
} gvls_lane;

typedef struct gvls_trace {
    _Atomic int active;        // read by the hook on every event
    uint64_t generation;       // bumped per trace: tells a native thread its lane is stale
    uint64_t start_ns;         // CLOCK_MONOTONIC at start
    int fd;

    pthread_mutex_t lock;      // guards everything below
    pthread_cond_t wake_writer;
    gvls_chunk *queue_head, *queue_tail;  // sealed chunks for the writer
    gvls_chunk *free_chunks;
    size_t chunks_allocated, max_chunks;
    gvls_lane *lanes;
    uint32_t next_native_serial;
    uint64_t events_recorded;  // counted when a chunk is sealed
    uint64_t events_dropped;   // counted when a chunk is sealed, or written off by the writer
    int writer_running, writer_stop, write_errno;
    pthread_t writer;
} gvls_trace;

extern gvls_trace gvls_current_trace;

// Appends a record to the chunk of the calling native thread's lane. The count is published after
// the record (a release store: a plain mov on x86-64), so the flight recorder can copy the first
// `count` records of a lane's chunk while its owner keeps appending.
static inline void gvls_chunk_append(gvls_chunk *chunk, uint64_t record) {
    uint32_t count = chunk->header.count;
    chunk->records[count] = record;
    __atomic_store_n(&chunk->header.count, count + 1, __ATOMIC_RELEASE);
}

void gvls_trace_record(unsigned kind, uint32_t thread_serial, uint64_t now_ns);

// trace_buffer.c, called with the hook removed or from the writer
void gvls_trace_buffers_reset(size_t max_chunks);
void gvls_trace_buffers_flush(void);   // seal every lane's chunk (hook must be off)
void gvls_trace_buffers_free(void);
gvls_chunk *gvls_trace_take_queue(void);  // under lock
void gvls_trace_recycle(gvls_chunk *chunk); // under lock

// trace_writer.c
int gvls_write_all(int fd, const void *data, size_t bytes);  // 0 or errno
int gvls_trace_writer_start(void);     // 0 or errno
void gvls_trace_writer_stop(void);     // drains the queue, joins the thread

// trace_session.c: the file's header, and its thread table (calls Ruby: with the GVL)
int gvls_write_file_header(int fd, uint64_t start_monotonic_ns, uint64_t start_realtime_ns, uint32_t timeslice_us);
int gvls_write_thread_table(int fd);
uint64_t gvls_realtime_ns(void);

// flight_recorder.c
void gvls_flight_recorder_init(VALUE mNative);
void gvls_flight_recorder_after_fork(void);  // in a forked child: forget the parent's ring

#endif
