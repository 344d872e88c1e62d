// Consumer 2, the trace: per-native-thread event buffers (lanes) and the pool of chunks they fill,
// with the hot path that appends to them (trace_buffer.c). What drains sealed chunks, and where
// they go, is trace_session.h's business: one drain thread hands them to the running sink
// (sink_file.c writes them to a .gvl file, sink_ring.c keeps the newest in memory).
#ifndef GVLSCOPE_TRACE_H
#define GVLSCOPE_TRACE_H

#include "gvlscope.h"
#include "format.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define GVLS_RECORDS_PER_CHUNK 8192  // 64 KiB of records: one write(2) per 8192 events
#define GVLS_CHUNK_COPY 1            // a right-sized malloc'd copy (sink_ring.c)
#define GVLS_CHUNK_PREFORMATTED 2    // malloc'd file bytes, not events (sink_file.c's thread records); count 0

typedef struct gvls_chunk {
    struct gvls_chunk *next;   // in the drain queue, the free list or a sink's list
    int compact;               // not a pool chunk: GVLS_CHUNK_COPY or GVLS_CHUNK_PREFORMATTED
    uint32_t preformatted_bytes;  // GVLS_CHUNK_PREFORMATTED: bytes in records
    gvls_events_header header;
    uint64_t records[GVLS_RECORDS_PER_CHUNK];
} gvls_chunk;

// Everything one native thread records during a trace. Only that native thread appends to it,
// so appending needs no lock; the lock is taken only to hand a full chunk to the drain thread.
typedef struct gvls_lane {
    struct gvls_lane *next;    // all lanes of the trace, to flush them at stop
    gvls_chunk *chunk;         // being filled; NULL while no chunk could be had (events dropped)
    uint64_t base_abs_ns;      // absolute time of the chunk's base_ns
    uint32_t native_serial;
    uint32_t native_tid;
    uint32_t dropped;          // dropped since the last chunk: goes into the next chunk's header
    uint64_t cpu_listed_ns;    // the CPU time last written for it (trace_session.c's drain thread only)
} gvls_lane;

typedef struct gvls_trace {
    _Atomic int active;        // read by the hook on every event
    uint64_t generation;       // bumped per trace: tells a native thread its lane is stale
    uint64_t start_ns;         // CLOCK_MONOTONIC at start

    // Guards everything below, and sink_ring.c's ring. A leaf lock: held for a few list operations,
    // never while taking another lock, calling Ruby or waiting for the GVL (the hook takes it
    // with or without the GVL, so anything more could deadlock).
    pthread_mutex_t lock;
    pthread_cond_t wake_drain; // signalled when a chunk is queued (or the drain thread must stop)
    gvls_chunk *queue_head, *queue_tail;  // sealed chunks for the drain thread
    gvls_chunk *free_chunks;
    size_t chunks_allocated, max_chunks;
    gvls_lane *lanes;
    uint32_t next_native_serial;
    uint64_t events_recorded;  // counted when a chunk is sealed
    uint64_t events_dropped;   // counted when a chunk is sealed, or written off by a sink
} gvls_trace;

extern gvls_trace gvls_current_trace;

// Appends a record to the chunk of the calling native thread's lane. The count is published after
// the record (a release store: a plain mov on x86-64), so the flight recorder can copy the first
// `count` records of a lane's chunk while its owner keeps appending (gvls_trace_copy_lanes_locked).
static inline void gvls_chunk_append(gvls_chunk *chunk, uint64_t record) {
    uint32_t count = chunk->header.count;
    chunk->records[count] = record;
    __atomic_store_n(&chunk->header.count, count + 1, __ATOMIC_RELEASE);
}

// Called by the hook after an acquire load of T.active saw 1: gvls_session_start bumps the
// generation before it stores active = 1, so the generation read here is the new trace's, never
// an older one whose lanes were freed (plain loads on x86-64; matters on weakly ordered CPUs).
void gvls_trace_record(unsigned kind, uint32_t thread_serial, uint64_t now_ns);
// At a thread's EXITED (the hook, T.active seen): the running native thread's lane gives its chunk
// back (sealed if it holds events).
void gvls_trace_release_lane(void);

// trace_buffer.c, called with the hook removed or from the drain thread
void gvls_trace_buffers_reset(size_t max_chunks);
void gvls_trace_buffers_flush(void);   // seal every lane's chunk (hook must be off)
void gvls_trace_buffers_free(void);    // lanes, pool and whatever is still queued
gvls_chunk *gvls_trace_take_queue(void);  // under lock
void gvls_trace_queue_locked(gvls_chunk *chunk);  // under lock: for the drain thread, after what is queued
void gvls_trace_recycle(gvls_chunk *chunk); // under lock
void gvls_chunks_free(gvls_chunk *list);    // free(3)s a list linked by next
// Under lock: malloc'd copies (linked by next) of the records every lane's chunk holds so far, and
// of the sealed chunks still queued for the drain thread.
gvls_chunk *gvls_trace_copy_lanes_locked(void);
// Under lock: events lanes dropped (no chunk to be had) that no chunk header reports yet.
uint64_t gvls_trace_pending_drops_locked(void);

#endif
