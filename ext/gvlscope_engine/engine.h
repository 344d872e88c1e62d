// The report engine: one pass over a .gvl trace (or imported events) that replays the timeline's
// state machine (test/support/reference_timeline.rb, rule for rule) and feeds every consumer as
// intervals close, so no interval is kept: per-thread rows, histograms, blame, code locations,
// the HTML overview, detail windows and the exports' interval spill. docs/architecture.md has the
// whole design; the recorder (ext/gvlscope) is a separate extension and shares nothing with this.
#ifndef GVLSCOPE_ENGINE_H
#define GVLSCOPE_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

// ---- memory: every allocation of the engine is counted, so tests can assert its peak size.
typedef struct {
    size_t current;
    size_t peak;
} eng_memory;

void *eng_alloc(eng_memory *memory, size_t bytes);                        // zeroed
void *eng_malloc(eng_memory *memory, size_t bytes);                       // not zeroed
void *eng_realloc(eng_memory *memory, void *pointer, size_t old_bytes, size_t new_bytes); // new part zeroed
void eng_free(eng_memory *memory, void *pointer, size_t bytes);

// A growable array of fixed-size elements.
typedef struct {
    char *data;
    size_t size;      // elements
    size_t capacity;  // elements
    size_t element;   // bytes per element
} eng_vec;

void vec_init(eng_vec *vec, size_t element);
void *vec_push(eng_memory *memory, eng_vec *vec); // a zeroed new element
void vec_free(eng_memory *memory, eng_vec *vec);
#define VEC_AT(vec, type, index) (((type *)(vec).data)[index])

// Open addressing map from a 64-bit key to a 32-bit value (an index into some array).
typedef struct {
    uint64_t *keys;
    uint32_t *values;
    size_t capacity; // a power of two; slot empty when values[i] == UINT32_MAX
    size_t size;
} eng_map;

void map_init(eng_memory *memory, eng_map *map, size_t capacity);
uint32_t map_get(const eng_map *map, uint64_t key); // UINT32_MAX when absent
void map_put(eng_memory *memory, eng_map *map, uint64_t key, uint32_t value);
void map_free(eng_memory *memory, eng_map *map);

// ---- vocabulary (lib/gvlscope/vocabulary.rb); Ruby maps the numbers back to symbols.
enum { EV_STARTED = 1, EV_READY, EV_RESUMED, EV_SUSPENDED, EV_EXITED, EV_GC_ENTER, EV_GC_EXIT, EV_ARG, EV_SAMPLE };
enum { ST_NONE = 0, ST_STARTED, ST_WAIT, ST_RUN, ST_GC, ST_IDLE, ST_EXITED, ST_GONE, ST_COUNT };
// Reasons: release causes and idle reasons in one numbering (Model::Scan::REASONS).
enum { R_NONE = 0, R_IO, R_SLEEP, R_LOCK, R_JOIN, R_PASS, R_BLOCKING, R_PREEMPTED, R_EXIT, R_IO_SLEEP, R_UNKNOWN,
       R_COUNT };

#define LOG2_BUCKETS 64
static inline unsigned log2_bucket(uint64_t value) { return value ? 64u - (unsigned)__builtin_clzll(value) : 0u; }
// Ruby's Integer#bit_length of a possibly negative value (a corrupt trace's negative duration).
static inline unsigned bit_length(int64_t value) { return log2_bucket(value < 0 ? ~(uint64_t)value : (uint64_t)value); }

// ---- one interval, as Model::Interval.
typedef struct {
    int64_t start;
    int64_t end;
    uint32_t thread;   // dense thread index
    uint32_t native;   // native serial when has_native
    uint32_t site;     // release site stack id (0: none)
    uint8_t state;
    uint8_t reason;
    uint8_t has_native;
    uint8_t listed;    // false for the zero-length intervals the timeline does not keep
} eng_interval;

// ---- medians: exact (values.sort[size / 2]) while the values fit a budget, else from a
// log-linear histogram (128 sub-buckets per power of two: within 1 %).
#define MEDIAN_SUB_BITS 7
#define MEDIAN_BUCKETS ((64 - MEDIAN_SUB_BITS + 1) << MEDIAN_SUB_BITS)
typedef struct {
    int64_t *values;
    size_t size;
    size_t capacity;
    uint64_t *histogram; // non-NULL once it fell back
    uint64_t count;
} eng_median;

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
    bool stacks;
    eng_chunk *chunks;
    size_t chunk_count;
    eng_item *items;      // imported events (gvl-tracing): already in order, in memory
    size_t item_count;
    size_t next_chunk;    // pass 1 progress
    uint64_t record_index;
    // lanes, for an ARG that follows its record across chunks
    eng_map lane_of;
    eng_vec lanes;        // {int32 last chunk, uint8 last kind}
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

int eng_index_open(eng_index *index, const char *path, bool stacks, const uint64_t *chunks, size_t count);
void eng_index_imported(eng_index *index, const int64_t *times, const uint8_t *kinds, const uint32_t *serials,
                        size_t count);
int eng_index_step(eng_index *index, uint64_t budget_bytes, bool *done); // 0 or -errno
void eng_index_free(eng_index *index);
int eng_read_records(eng_index *index, const eng_chunk *chunk, uint64_t *records); // 0 or -errno

typedef struct eng_engine eng_engine;

#endif
