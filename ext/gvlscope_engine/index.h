// Pass 1 (index.c): the merge's input items, the chunks and threads the index finds, its API.
#ifndef GVLSCOPE_ENGINE_INDEX_H
#define GVLSCOPE_ENGINE_INDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util.h"

// ---- merge input: one item per event or sample, in (time, file index) order.
typedef struct {
    int64_t time;
    uint64_t index;  // position in file order: the tie-break of equal times
    uint32_t serial;
    uint32_t native;
    uint32_t aux;    // SUSPENDED: release site stack id; SAMPLE: the holder's stack id (0: none)
    uint8_t kind;
    uint8_t has_arg; // an ARG followed it (a SAMPLE without one is not a sample)
} eng_item;

// ---- an event loop's turn record (version 4), as pass 1 finds it: not an event, not a merge item.
typedef struct {
    int64_t time;
    uint64_t index;  // file order: the tie-break of equal times
    uint32_t serial; // the loop's thread
    uint32_t arg;    // TURN_BEGIN: the fiber's serial; TURN_SITE: a stack id; 0: none
    uint8_t kind;    // EV_TURN_BEGIN, EV_TURN_END, EV_TURN_SITE, EV_TURN_READY
} eng_turn_record;

// ---- the index (pass 1): what every later pass needs to know before it starts.
typedef struct {
    uint64_t offset;      // file offset of its first record
    int64_t base;
    uint64_t first_index; // file-order index of its first record (all records: the ties' order)
    int64_t min_time;     // its smallest item (event or sample): when it joins the merge
    uint64_t min_index;
    uint32_t count;
    uint32_t lane;        // native serial
    int32_t trailing_arg; // the ARG value that follows its last record in its lane's next chunk, or -1
    uint8_t sorted;       // records in time order (a recorded trace's always are)
    uint8_t has_items;
} eng_chunk;

typedef struct {
    uint32_t serial;
    int64_t first_time;   // its first event in time order, and that event's kind
    uint64_t first_index;
    uint8_t first_kind;
} eng_first;

typedef struct {
    eng_memory memory;
    int fd;
    bool args;            // ARG records carry values (a trace with stacks, or version 4): not events
    eng_chunk *chunks;
    size_t chunk_count;
    eng_item *items;      // imported events (gvl-tracing): already in order, in memory
    size_t item_count;
    size_t next_chunk;    // pass 1 progress
    uint64_t record_index;
    // lanes, for an ARG that follows its record across chunks
    eng_map lane_of;
    eng_vec lanes;        // {int32 last chunk, uint8 last kind, last turn record}
    eng_vec turns;        // eng_turn_record, in file order
    // results
    eng_map first_of;     // serial -> index in firsts
    eng_vec firsts;       // eng_first
    uint64_t events;
    uint64_t stack_records;
    int64_t max_time;
    bool has_events;
    bool bad;             // an unknown event kind: the first in time order
    int64_t bad_time;
    uint64_t bad_index;
    uint32_t bad_kind;
    uint64_t bad_byte;    // where the reader's message says it is
    uint64_t bytes_done;
} eng_index;

int eng_index_open(eng_index *index, const char *path, bool args, const uint64_t *chunks, size_t count);
void eng_index_imported(eng_index *index, const int64_t *times, const uint8_t *kinds, const uint32_t *serials,
                        size_t count);
int eng_index_step(eng_index *index, uint64_t budget_bytes, bool *done); // 0 or -errno
void eng_index_free(eng_index *index);
int eng_read_records(eng_index *index, const eng_chunk *chunk, uint64_t *records); // 0 or -errno

#endif
