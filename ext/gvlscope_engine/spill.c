// The exports' copy of the intervals. A format writes thread after thread, but one pass closes
// the intervals of all threads in time order: each thread's final intervals are kept here,
// ~5 bytes each (varints: state and reason, start after the previous end, duration, native
// thread), in 4 KiB blocks that go to an unlinked temporary file as they fill. Memory: one block
// per thread; the file: the intervals of the whole trace, read back once, thread by thread.
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pass_shared.h"

#define BLOCK 4096
#define RECORD_MAX 32

static uint8_t *put_varint(uint8_t *out, uint64_t value) {
    while (value >= 0x80) {
        *out++ = (uint8_t)(value | 0x80);
        value >>= 7;
    }
    *out++ = (uint8_t)value;
    return out;
}

static uint64_t zigzag(int64_t value) { return ((uint64_t)value << 1) ^ (uint64_t)(value >> 63); }
static int64_t unzigzag(uint64_t value) { return (int64_t)(value >> 1) ^ -(int64_t)(value & 1); }

static int open_spill(eng_engine *engine) {
    if (engine->spill_fd >= 0) return 0;
    const char *dir = engine->spill_dir ? engine->spill_dir : "/tmp";
    size_t length = strlen(dir) + 32;
    char *path = malloc(length);
    if (!path) abort();
    snprintf(path, length, "%s/gvlscope-spill-XXXXXX", dir);
    int fd = mkstemp(path);
    if (fd < 0) {
        int error = errno;
        free(path);
        return -error;
    }
    unlink(path); // gone with the process, whatever happens
    free(path);
    engine->spill_fd = fd;
    return 0;
}

static int flush_block(eng_engine *engine, eng_stream *stream) {
    if (stream->used == 0) return 0;
    int status = open_spill(engine);
    if (status) return status;
    size_t done = 0;
    while (done < stream->used) {
        ssize_t wrote = pwrite(engine->spill_fd, stream->buffer + done, stream->used - done,
                               (off_t)(engine->spill_size + done));
        if (wrote < 0) {
            if (errno == EINTR) continue;
            return -errno;
        }
        done += (size_t)wrote;
    }
    *(uint64_t *)vec_push(&engine->memory, &stream->blocks) = engine->spill_size << 16 | stream->used;
    engine->spill_size += stream->used;
    stream->used = 0;
    return 0;
}

static int room(eng_engine *engine, eng_stream *stream) {
    if (!stream->buffer) {
        stream->buffer = eng_alloc(&engine->memory, BLOCK);
        vec_init(&stream->blocks, sizeof(uint64_t));
    }
    if (stream->used + RECORD_MAX <= BLOCK) return 0;
    return flush_block(engine, stream);
}

int eng_stream_add(eng_engine *engine, eng_stream *stream, const eng_interval *interval) {
    int status = room(engine, stream);
    if (status) return status;
    uint8_t *out = stream->buffer + stream->used;
    *out++ = (uint8_t)(interval->state | interval->reason << 3 | interval->has_native << 7);
    out = put_varint(out, zigzag(interval->start - stream->last_end));
    out = put_varint(out, zigzag(interval->end - interval->start));
    if (interval->has_native) out = put_varint(out, interval->native);
    stream->used = (uint32_t)(out - stream->buffer);
    stream->last_end = interval->end;
    stream->intervals++;
    return 0;
}

// The waiting counter: (time, threads waiting), as an interval's start and end.
int eng_counter_add(eng_engine *engine, int64_t time, int64_t value) {
    eng_stream *stream = &engine->counter;
    int status = room(engine, stream);
    if (status) return status;
    uint8_t *out = stream->buffer + stream->used;
    out = put_varint(out, zigzag(time - stream->last_end));
    out = put_varint(out, zigzag(value));
    stream->used = (uint32_t)(out - stream->buffer);
    stream->last_end = time;
    stream->intervals++;
    return 0;
}

int eng_stream_finish(eng_engine *engine, eng_stream *stream) {
    (void)engine;
    (void)stream;
    return 0; // the last block stays in memory
}

void eng_stream_free(eng_engine *engine, eng_stream *stream) {
    eng_free(&engine->memory, stream->buffer, stream->buffer ? BLOCK : 0);
    stream->buffer = NULL;
    vec_free(&engine->memory, &stream->blocks);
}

static uint64_t get_varint(const uint8_t **in, const uint8_t *end) {
    uint64_t value = 0;
    for (unsigned shift = 0; *in < end && shift < 64; shift += 7) {
        uint8_t byte = *(*in)++;
        value |= (uint64_t)(byte & 0x7f) << shift;
        if (!(byte & 0x80)) break;
    }
    return value;
}

static int decode(const uint8_t *data, size_t size, bool counter, int64_t *last_end, eng_visit visit, void *context) {
    const uint8_t *in = data, *end = data + size;
    while (in < end) {
        eng_interval interval = { 0 };
        if (counter) {
            interval.start = *last_end + unzigzag(get_varint(&in, end));
            interval.end = unzigzag(get_varint(&in, end)); // the value
            *last_end = interval.start;
        } else {
            uint8_t head = *in++;
            interval.state = head & 7;
            interval.reason = (head >> 3) & 15;
            interval.has_native = head >> 7;
            interval.start = *last_end + unzigzag(get_varint(&in, end));
            interval.end = interval.start + unzigzag(get_varint(&in, end));
            if (interval.has_native) interval.native = (uint32_t)get_varint(&in, end);
            interval.listed = 1;
            *last_end = interval.end;
        }
        int stop = visit(context, &interval);
        if (stop) return stop;
    }
    return 0;
}

int eng_stream_each(eng_engine *engine, const eng_stream *stream, bool counter, eng_visit visit, void *context) {
    int64_t last_end = 0;
    uint8_t *block = NULL;
    for (size_t i = 0; i < stream->blocks.size; i++) {
        uint64_t entry = VEC_AT(stream->blocks, uint64_t, i);
        uint64_t offset = entry >> 16;
        size_t length = entry & 0xffff;
        if (!block) block = malloc(BLOCK);
        if (!block) abort();
        size_t done = 0;
        while (done < length) {
            ssize_t got = pread(engine->spill_fd, block + done, length - done, (off_t)(offset + done));
            if (got < 0 && errno == EINTR) continue;
            if (got <= 0) {
                free(block);
                return got < 0 ? -errno : -EIO;
            }
            done += (size_t)got;
        }
        int stop = decode(block, length, counter, &last_end, visit, context);
        if (stop) {
            free(block);
            return stop;
        }
    }
    free(block);
    if (stream->buffer) return decode(stream->buffer, stream->used, counter, &last_end, visit, context);
    return 0;
}
