// Per-native-thread buffers. The hook appends one 8-byte record to the lane of the native thread
// it runs on. Why lanes per native thread rather than per Ruby thread: READY for a thread is often
// fired by another native thread (the waker) while the subject fires its own events, so a per-Ruby-
// thread buffer would need atomics on every append; a lane has exactly one writer.
#include "trace.h"
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

gvls_trace gvls_current_trace = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .wake_drain = PTHREAD_COND_INITIALIZER,
};
#define T gvls_current_trace

#define GVLS_TLS __thread __attribute__((tls_model("initial-exec")))
static GVLS_TLS gvls_lane *tls_lane;
static GVLS_TLS uint64_t tls_lane_generation;
static GVLS_TLS uint32_t tls_tid;

// Under T.lock: a sealed chunk goes to the drain thread.
static void queue_locked(gvls_chunk *chunk) {
    T.events_recorded += chunk->header.count;
    chunk->next = NULL;
    if (T.queue_tail) T.queue_tail->next = chunk; else T.queue_head = chunk;
    T.queue_tail = chunk;
    pthread_cond_signal(&T.wake_drain);
}

// Under T.lock. Seals the lane's chunk (if it holds anything) and gives the lane a fresh one, or
// NULL when the sink is behind and the pool is at its limit: then events are dropped, counted.
static void lane_rotate_locked(gvls_lane *lane, uint64_t now_ns) {
    gvls_chunk *chunk = lane->chunk;
    if (chunk) {
        if (chunk->header.count == 0 && chunk->header.dropped_before == 0) {
            // Nothing to say yet: reuse it with a new base.
            lane->base_abs_ns = now_ns;
            chunk->header.base_ns = now_ns - T.start_ns;
            return;
        }
        queue_locked(chunk);
    }
    if (T.free_chunks) {
        chunk = T.free_chunks;
        T.free_chunks = chunk->next;
    } else if (T.chunks_allocated < T.max_chunks && (chunk = malloc(sizeof(gvls_chunk)))) {
        T.chunks_allocated++;
        chunk->compact = 0;
    } else {
        chunk = NULL;
    }
    lane->chunk = chunk;
    if (chunk) {
        chunk->header = (gvls_events_header){
            .native_serial = lane->native_serial,
            .native_tid = lane->native_tid,
            .base_ns = now_ns - T.start_ns,
            .dropped_before = lane->dropped,
        };
        T.events_dropped += lane->dropped;
        lane->dropped = 0;
        lane->base_abs_ns = now_ns;
    }
}

// At a thread's EXITED, on its own native thread: the native thread is about to end (or, under M:N,
// to run other threads later), and a lane that keeps its chunk holds 64 KiB of the pool for ever.
// Its chunk is sealed (or given back, if empty) now; a later event on this native thread takes a
// fresh one. A lock per thread exit: a rare slow path, like the thread's creation.
void gvls_trace_release_lane(void) {
    gvls_lane *lane = tls_lane;
    if (tls_lane_generation != T.generation || !lane) return;  // the caller read T.active with acquire
    pthread_mutex_lock(&T.lock);
    gvls_chunk *chunk = lane->chunk;
    lane->chunk = NULL;
    if (chunk && (chunk->header.count || chunk->header.dropped_before)) {
        queue_locked(chunk);
    } else if (chunk) {
        gvls_trace_recycle(chunk);
    }
    pthread_mutex_unlock(&T.lock);
}

static gvls_lane *lane_for_this_native_thread(uint64_t now_ns) {
    if (tls_lane_generation == T.generation) return tls_lane;
    if (!tls_tid) tls_tid = (uint32_t)syscall(SYS_gettid);
    gvls_lane *lane = calloc(1, sizeof(*lane));
    pthread_mutex_lock(&T.lock);
    if (!lane) {
        // No lane, no place to count drops in: counted here, and the next event tries again
        // (the generation is not taken, or the fast path would use the NULL lane).
        T.events_dropped++;
        pthread_mutex_unlock(&T.lock);
        return NULL;
    }
    lane->native_serial = ++T.next_native_serial;
    lane->native_tid = tls_tid;
    lane->next = T.lanes;
    T.lanes = lane;
    lane_rotate_locked(lane, now_ns);
    pthread_mutex_unlock(&T.lock);
    tls_lane = lane;
    tls_lane_generation = T.generation;
    return lane;
}

// The slow path of gvls_trace_record, kept out of line so the fast path needs no register saves.
__attribute__((noinline)) static void record_slow(gvls_lane *lane, unsigned kind, uint32_t thread_serial, uint64_t now_ns) {
    if (!lane) return;
    if (now_ns < lane->base_abs_ns) now_ns = lane->base_abs_ns;  // never negative deltas
    gvls_chunk *chunk = lane->chunk;
    if (!chunk || chunk->header.count == GVLS_RECORDS_PER_CHUNK || now_ns - lane->base_abs_ns > GVLS_RECORD_MAX_DELTA) {
        pthread_mutex_lock(&T.lock);
        lane_rotate_locked(lane, now_ns);
        pthread_mutex_unlock(&T.lock);
        chunk = lane->chunk;
        if (!chunk) { lane->dropped++; return; }
    }
    gvls_chunk_append(chunk, gvls_record(kind, thread_serial, now_ns - lane->base_abs_ns));
}

void gvls_trace_record(unsigned kind, uint32_t thread_serial, uint64_t now_ns) {
    gvls_lane *lane = tls_lane;
    if (__builtin_expect(tls_lane_generation == T.generation && lane->chunk != NULL, 1)) {
        gvls_chunk *chunk = lane->chunk;
        uint64_t delta = now_ns - lane->base_abs_ns;  // wraps to huge if now < base: slow path
        if (__builtin_expect(chunk->header.count < GVLS_RECORDS_PER_CHUNK && delta <= GVLS_RECORD_MAX_DELTA, 1)) {
            gvls_chunk_append(chunk, gvls_record(kind, thread_serial, delta));
            return;
        }
    }
    record_slow(lane_for_this_native_thread(now_ns), kind, thread_serial, now_ns);
}

void gvls_trace_buffers_reset(size_t max_chunks) {
    pthread_mutex_lock(&T.lock);
    T.generation++;
    T.max_chunks = max_chunks;
    T.next_native_serial = 0;
    T.events_recorded = T.events_dropped = 0;
    pthread_mutex_unlock(&T.lock);
}

// With the hook removed nobody appends: seal what every lane holds, including drops at the end.
void gvls_trace_buffers_flush(void) {
    pthread_mutex_lock(&T.lock);
    for (gvls_lane *lane = T.lanes; lane; lane = lane->next) {
        if (lane->chunk && (lane->chunk->header.count || lane->chunk->header.dropped_before)) {
            lane_rotate_locked(lane, lane->base_abs_ns);
        }
        if (lane->chunk) {  // the spare the rotation handed out
            lane->chunk->next = T.free_chunks;
            T.free_chunks = lane->chunk;
            lane->chunk = NULL;
        }
        T.events_dropped += lane->dropped;  // drops no later chunk will report
        lane->dropped = 0;
    }
    pthread_mutex_unlock(&T.lock);
}

void gvls_chunks_free(gvls_chunk *list) {
    for (gvls_chunk *next; list; list = next) { next = list->next; free(list); }
}

void gvls_trace_buffers_free(void) {
    pthread_mutex_lock(&T.lock);
    for (gvls_lane *lane = T.lanes, *next; lane; lane = next) { next = lane->next; free(lane->chunk); free(lane); }
    T.lanes = NULL;
    gvls_chunks_free(T.free_chunks);
    T.free_chunks = NULL;
    gvls_chunks_free(gvls_trace_take_queue());  // empty after a drain; a forked child's are the parent's
    T.chunks_allocated = 0;
    pthread_mutex_unlock(&T.lock);
}

// A lane's chunk is appended to by its owner without the lock, but only past `count` (published
// with a release store), and it is swapped only under the lock: the first `count` records can be
// copied safely while the owner keeps appending.
static gvls_chunk *copy_chunk(const gvls_chunk *chunk, uint32_t count, gvls_chunk *next) {
    gvls_chunk *copy = malloc(offsetof(gvls_chunk, records) + count * sizeof(uint64_t));
    if (!copy) return NULL;
    memcpy(&copy->header, &chunk->header, sizeof(copy->header));
    copy->header.count = count;
    memcpy(copy->records, chunk->records, count * sizeof(uint64_t));
    copy->next = next;
    return copy;
}

gvls_chunk *gvls_trace_copy_lanes_locked(void) {
    gvls_chunk *copies = NULL;
    for (gvls_lane *lane = T.lanes; lane; lane = lane->next) {
        gvls_chunk *chunk = lane->chunk;
        if (!chunk) continue;
        uint32_t count = __atomic_load_n(&chunk->header.count, __ATOMIC_ACQUIRE);
        if (count == 0) continue;
        gvls_chunk *copy = copy_chunk(chunk, count, copies);
        if (copy) copies = copy;
    }
    // Sealed chunks the drain thread has not taken yet (a thread that just exited sealed its own).
    for (gvls_chunk *chunk = T.queue_head; chunk; chunk = chunk->next) {
        if (!chunk->header.count) continue;
        gvls_chunk *copy = copy_chunk(chunk, chunk->header.count, copies);
        if (copy) copies = copy;
    }
    return copies;
}

uint64_t gvls_trace_pending_drops_locked(void) {
    uint64_t dropped = 0;
    for (gvls_lane *lane = T.lanes; lane; lane = lane->next) dropped += lane->dropped;
    return dropped;
}

gvls_chunk *gvls_trace_take_queue(void) {
    gvls_chunk *head = T.queue_head;
    T.queue_head = T.queue_tail = NULL;
    return head;
}

void gvls_trace_queue_locked(gvls_chunk *chunk) {
    queue_locked(chunk);
}

void gvls_trace_recycle(gvls_chunk *chunk) {
    chunk->next = T.free_chunks;
    T.free_chunks = chunk;
}
