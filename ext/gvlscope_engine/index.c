// Pass 1 over a .gvl trace: every record once, in file order (lib/gvlscope/model/trace_file.rb
// checked the chunks' framing before). It finds what the merge and the state machine need before
// they start: each thread's first event (a thread that existed before the trace is in the state
// that event implies from time 0, and the blame must know it from the start), each chunk's
// first item and whether its records are in time order, the ARG that follows a chunk's last
// record in the next chunk of its lane, the number of events, the last event's time, and the
// first unknown event kind in time order (the error the Ruby reader gives).
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine.h"

typedef struct {
    int32_t last_chunk; // the chunk holding the lane's last record that is not an ARG, or -1
    uint8_t last_kind;  // its kind; 0 after an ARG (nothing to attach to)
    uint32_t last_turn; // the turn record the lane's last record is (its ARG is its value), or UINT32_MAX
} eng_lane;

#define RECORD_BLOCK 8192

int eng_index_open(eng_index *index, const char *path, bool args, const uint64_t *packed, size_t count) {
    memset(index, 0, sizeof(*index));
    index->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (index->fd < 0) return -errno;
    index->args = args;
    index->chunk_count = count;
    index->chunks = eng_alloc(&index->memory, (count ? count : 1) * sizeof(eng_chunk));
    // packed: per chunk offset of its records, base_ns, count | native << 32
    for (size_t i = 0; i < count; i++) {
        eng_chunk *chunk = &index->chunks[i];
        chunk->offset = packed[3 * i];
        chunk->base = (int64_t)packed[3 * i + 1];
        chunk->count = (uint32_t)packed[3 * i + 2];
        chunk->lane = (uint32_t)(packed[3 * i + 2] >> 32);
        chunk->trailing_arg = -1;
        chunk->sorted = 1;
    }
    map_init(&index->memory, &index->lane_of, 16);
    vec_init(&index->lanes, sizeof(eng_lane));
    vec_init(&index->turns, sizeof(eng_turn_record));
    map_init(&index->memory, &index->first_of, 64);
    vec_init(&index->firsts, sizeof(eng_first));
    return 0;
}

static void note_event(eng_index *index, uint32_t serial, int64_t time, uint64_t order, uint8_t kind) {
    uint32_t at = map_get(&index->first_of, serial);
    if (at == UINT32_MAX) {
        at = (uint32_t)index->firsts.size;
        eng_first *first = vec_push(&index->memory, &index->firsts);
        first->serial = serial;
        first->first_time = time;
        first->first_index = order;
        first->first_kind = kind;
        map_put(&index->memory, &index->first_of, serial, at);
        return;
    }
    eng_first *first = &VEC_AT(index->firsts, eng_first, at);
    if (time < first->first_time || (time == first->first_time && order < first->first_index)) {
        first->first_time = time;
        first->first_index = order;
        first->first_kind = kind;
    }
}

// Events of a gvl-tracing import: already in time order, one native thread per Ruby thread.
void eng_index_imported(eng_index *index, const int64_t *times, const uint8_t *kinds, const uint32_t *serials,
                        size_t count) {
    memset(index, 0, sizeof(*index));
    index->fd = -1;
    map_init(&index->memory, &index->first_of, 64);
    vec_init(&index->firsts, sizeof(eng_first));
    map_init(&index->memory, &index->lane_of, 16);
    vec_init(&index->lanes, sizeof(eng_lane));
    vec_init(&index->turns, sizeof(eng_turn_record));
    index->items = eng_alloc(&index->memory, (count ? count : 1) * sizeof(eng_item));
    index->item_count = count;
    for (size_t i = 0; i < count; i++) {
        eng_item *item = &index->items[i];
        item->time = times[i];
        item->index = i;
        item->kind = kinds[i];
        item->serial = serials[i];
        item->native = serials[i];
        note_event(index, serials[i], times[i], i, kinds[i]);
        if (!index->has_events || times[i] > index->max_time) index->max_time = times[i];
        index->has_events = true;
    }
    index->events = count;
    index->next_chunk = 0;
}

int eng_read_records(eng_index *index, const eng_chunk *chunk, uint64_t *records) {
    size_t want = (size_t)chunk->count * 8;
    size_t done = 0;
    while (done < want) {
        ssize_t got = pread(index->fd, (char *)records + done, want - done, (off_t)(chunk->offset + done));
        if (got < 0) {
            if (errno == EINTR) continue;
            return -errno;
        }
        if (got == 0) return -EIO; // the file shrank since its chunks were framed
        done += (size_t)got;
    }
    return 0;
}

static eng_lane *lane_for(eng_index *index, uint32_t native) {
    uint32_t at = map_get(&index->lane_of, native);
    if (at == UINT32_MAX) {
        at = (uint32_t)index->lanes.size;
        eng_lane *lane = vec_push(&index->memory, &index->lanes);
        lane->last_chunk = -1;
        lane->last_turn = UINT32_MAX;
        map_put(&index->memory, &index->lane_of, native, at);
    }
    return &VEC_AT(index->lanes, eng_lane, at);
}

static int index_chunk(eng_index *index, size_t number, uint64_t *records) {
    eng_chunk *chunk = &index->chunks[number];
    chunk->first_index = index->record_index;
    uint64_t kept_before = index->events;
    eng_lane *lane = lane_for(index, chunk->lane);
    int64_t previous_time = INT64_MIN;
    for (uint32_t done = 0; done < chunk->count; done += RECORD_BLOCK) {
        uint32_t block = chunk->count - done < RECORD_BLOCK ? chunk->count - done : RECORD_BLOCK;
        eng_chunk part = *chunk;
        part.offset = chunk->offset + (uint64_t)done * 8;
        part.count = block;
        int status = eng_read_records(index, &part, records);
        if (status) return status;
        for (uint32_t i = 0; i < block; i++) {
            uint64_t record = records[i];
            uint8_t kind = (uint8_t)gvls_record_kind(record);
            uint32_t serial = gvls_record_value(record);
            int64_t time = chunk->base + (int64_t)gvls_record_delta(record);
            uint64_t order = index->record_index++;
            if (time < previous_time) chunk->sorted = 0;
            previous_time = time;
            if (index->args && kind >= EV_ARG) {
                index->stack_records++;
                if (kind == EV_ARG) {
                    // An ARG after the lane's last record of an earlier chunk: that chunk's trailer.
                    if (lane->last_chunk >= 0 && (size_t)lane->last_chunk != number &&
                        (lane->last_kind == EV_SUSPENDED || lane->last_kind == EV_SAMPLE)) {
                        index->chunks[lane->last_chunk].trailing_arg = (int32_t)serial;
                    }
                    if (lane->last_turn != UINT32_MAX) VEC_AT(index->turns, eng_turn_record, lane->last_turn).arg = serial;
                    lane->last_kind = 0;
                    lane->last_chunk = -1;
                    lane->last_turn = UINT32_MAX;
                    continue;
                }
                lane->last_chunk = (int32_t)number;
                lane->last_kind = kind;
                lane->last_turn = UINT32_MAX;
                if (kind >= EV_TURN_BEGIN && kind <= EV_TURN_READY) {
                    // Kept apart for the loops' turns (Index#turns); the passes never see them.
                    lane->last_turn = (uint32_t)index->turns.size;
                    eng_turn_record *turn = vec_push(&index->memory, &index->turns);
                    *turn = (eng_turn_record){ .time = time, .index = order, .serial = serial, .kind = kind };
                    continue;
                }
                if (kind == EV_SAMPLE) {
                    if (!chunk->has_items || time < chunk->min_time ||
                        (time == chunk->min_time && order < chunk->min_index)) {
                        chunk->min_time = time;
                        chunk->min_index = order;
                    }
                    chunk->has_items = 1;
                    continue;
                }
                // kinds 14-15 fall through: events of an unknown kind
            } else {
                lane->last_chunk = (int32_t)number;
                lane->last_kind = kind;
                lane->last_turn = UINT32_MAX;
            }
            uint64_t kept = index->events++;
            if (!chunk->has_items || time < chunk->min_time || (time == chunk->min_time && order < chunk->min_index)) {
                chunk->min_time = time;
                chunk->min_index = order;
            }
            chunk->has_items = 1;
            if (kind < EV_STARTED || kind > EV_GC_EXIT) {
                if (!index->bad || time < index->bad_time || (time == index->bad_time && order < index->bad_index)) {
                    index->bad = true;
                    index->bad_time = time;
                    index->bad_index = order;
                    index->bad_kind = kind;
                    // As the Ruby reader names it: the chunk's records' offset plus 8 per event before
                    // it in the chunk (ARG and SAMPLE records, taken out, are not counted).
                    index->bad_byte = chunk->offset + (kept - kept_before) * 8;
                }
                continue;
            }
            if (!index->has_events || time > index->max_time) index->max_time = time;
            index->has_events = true;
            note_event(index, serial, time, order, kind);
        }
    }
    index->bytes_done += (uint64_t)chunk->count * 8 + 32;
    return 0;
}

int eng_index_step(eng_index *index, uint64_t budget_bytes, bool *done) {
    *done = false;
    if (index->items) {
        *done = true;
        return 0;
    }
    uint64_t *records = malloc(RECORD_BLOCK * 8);
    if (!records) abort();
    uint64_t start = index->bytes_done;
    while (index->next_chunk < index->chunk_count && index->bytes_done - start < budget_bytes) {
        int status = index_chunk(index, index->next_chunk, records);
        if (status) {
            free(records);
            return status;
        }
        index->next_chunk++;
    }
    free(records);
    *done = index->next_chunk >= index->chunk_count;
    return 0;
}

void eng_index_free(eng_index *index) {
    if (index->fd >= 0) close(index->fd);
    index->fd = -1;
    eng_free(&index->memory, index->chunks, (index->chunk_count ? index->chunk_count : 1) * sizeof(eng_chunk));
    eng_free(&index->memory, index->items, (index->item_count ? index->item_count : 1) * sizeof(eng_item));
    index->chunks = NULL;
    index->items = NULL;
    map_free(&index->memory, &index->lane_of);
    vec_free(&index->memory, &index->lanes);
    vec_free(&index->memory, &index->turns);
    map_free(&index->memory, &index->first_of);
    vec_free(&index->memory, &index->firsts);
}
