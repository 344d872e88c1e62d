// The native trace file (.gvl): what the C writer emits and lib/gvlscope/trace_file.rb reads.
// docs/format.md is the prose version of this file; change both together and bump the version.
//
// All integers are little-endian. The file is a header followed by chunks; a reader stops at the
// first incomplete chunk, so a file cut short (process killed) reads up to its last whole chunk.
#ifndef GVLSCOPE_FORMAT_H
#define GVLSCOPE_FORMAT_H

#include <stdint.h>

#define GVLS_MAGIC "GVLSCOPE"
#define GVLS_FORMAT_VERSION 5  // 2: header flags, thread creation sites, stack records and tables; 3: CPU chunks;
                               // 4: event-loop turn records (TURN_BEGIN, TURN_END, TURN_SITE), ARG in any trace;
                               // 5: TURN_READY

typedef struct {
    char magic[8];            // "GVLSCOPE"
    uint32_t version;         // GVLS_FORMAT_VERSION
    uint32_t header_bytes;    // sizeof(gvls_file_header): lets later versions append fields
    uint64_t start_monotonic_ns; // CLOCK_MONOTONIC at start; event times are relative to it
    uint64_t start_realtime_ns;  // CLOCK_REALTIME at the same moment, for humans
    uint32_t pid;
    uint32_t timeslice_us;    // the scheduler's timeslice as configured (100000 unless changed)
    uint32_t flags;           // GVLS_FILE_* (version 2)
    uint32_t reserved;
} gvls_file_header;

enum { GVLS_FILE_STACKS = 1 };  // the trace records code locations: ARG/SAMPLE records, a stacks chunk

// Every chunk starts with this. payload_bytes counts what follows the header.
typedef struct {
    uint32_t type;            // gvls_chunk_type
    uint32_t payload_bytes;
} gvls_chunk_header;

enum gvls_chunk_type {
    GVLS_CHUNK_EVENTS = 1,    // gvls_events_header + count × uint64 records
    GVLS_CHUNK_THREADS = 2,   // repeated gvls_thread_record + name bytes
    GVLS_CHUNK_END = 3,       // gvls_end_record: written by a clean stop
    GVLS_CHUNK_STACKS = 4,    // gvls_stacks_header, locations, stacks (version 2, stacks on)
    GVLS_CHUNK_CPU = 5,       // gvls_cpu_header + count × gvls_cpu_record (version 3)
};

// The events seen on one native thread, in time order.
typedef struct {
    uint32_t native_serial;   // 1, 2, ... in order of first event on that native thread
    uint32_t native_tid;      // the kernel's thread id (gettid)
    uint64_t base_ns;         // time of the first record, relative to start_monotonic_ns
    uint32_t count;           // records that follow
    uint32_t dropped_before;  // events this native thread dropped since its previous chunk
} gvls_events_header;

// One event in 8 bytes: kind in bits 0-3, the Ruby thread's serial in bits 4-27, and the time
// since the chunk's base_ns in bits 28-63 (36 bits: a chunk is sealed before 68 s elapse).
#define GVLS_RECORD_KIND_BITS 4
#define GVLS_RECORD_THREAD_BITS 24
#define GVLS_RECORD_DELTA_SHIFT (GVLS_RECORD_KIND_BITS + GVLS_RECORD_THREAD_BITS)
#define GVLS_RECORD_MAX_DELTA ((UINT64_C(1) << (64 - GVLS_RECORD_DELTA_SHIFT)) - 1)
#define GVLS_MAX_THREAD_SERIAL ((UINT32_C(1) << GVLS_RECORD_THREAD_BITS) - 1)

enum gvls_event_kind {
    GVLS_EV_STARTED = 1,
    GVLS_EV_READY = 2,
    GVLS_EV_RESUMED = 3,
    GVLS_EV_SUSPENDED = 4,
    GVLS_EV_EXITED = 5,
    GVLS_EV_GC_ENTER = 6,
    GVLS_EV_GC_EXIT = 7,
    // Not events: ARG carries a value (bits 4-27, in place of the thread serial) for the record
    // before it in the same lane, with the same time: after SUSPENDED the stack id of the release
    // site, after SAMPLE the holder's stack id, after TURN_BEGIN the fiber's serial, after
    // TURN_SITE a stack id. Its time stays a time so chunks rebase uniformly. Before version 4
    // ARG and SAMPLE occur only in traces with GVLS_FILE_STACKS.
    GVLS_EV_ARG = 8,
    GVLS_EV_SAMPLE = 9,       // the holder's stack was sampled while others waited (ARG follows)
    // Version 4, event loops (fibers.c; recorded while loop tracking is on), on the loop's thread,
    // in its lane. A turn: the thread's loop (its blocking fiber) gave it to a task (a
    // non-blocking fiber) until a task gave it back.
    GVLS_EV_TURN_BEGIN = 10,  // the loop switched to a task; ARG follows: the task fiber's serial
    GVLS_EV_TURN_END = 11,    // a task switched back to the loop
    // Where a fiber gave the loop back after a turn longer than GVLS_LONG_TURN_NS (trace with
    // stacks): read when that fiber next gets a turn (the hook runs in the fiber switched to, so
    // at TURN_END it is in the loop), right after that TURN_BEGIN and its ARG; ARG follows: the
    // stack id. It belongs to the fiber's previous turn on this thread.
    GVLS_EV_TURN_SITE = 12,
    // Version 5: the fiber of the turn in progress had been ready for a while when its turn began
    // (its wait in the scheduler ended: a socket's bytes came, a sleep was over, an unblock),
    // written when the fiber learns it, in its turn; ARG follows: how long, in microseconds
    // (at most 2^24 - 1: 16.7 s).
    GVLS_EV_TURN_READY = 13,
};

// A turn this long names its code (TURN_SITE): 10 ms of one fiber is a delay every other request
// of the loop feels, while reading a stack for every shorter turn would cost each switch.
#define GVLS_LONG_TURN_NS 10000000ull

// The record's fields, built and read only here (the recorder's writer and sinks, the report
// engine; Ruby's Model::Record takes the same macros from GVLScope::Engine's constants).
// +value+: the Ruby thread's serial, or an ARG's value (at most GVLS_MAX_THREAD_SERIAL).
static inline uint64_t gvls_record(unsigned kind, uint32_t value, uint64_t delta_ns) {
    return (uint64_t)kind | (uint64_t)value << GVLS_RECORD_KIND_BITS | delta_ns << GVLS_RECORD_DELTA_SHIFT;
}
static inline unsigned gvls_record_kind(uint64_t record) {
    return (unsigned)(record & ((UINT64_C(1) << GVLS_RECORD_KIND_BITS) - 1));
}
static inline uint32_t gvls_record_value(uint64_t record) {
    return (uint32_t)(record >> GVLS_RECORD_KIND_BITS) & GVLS_MAX_THREAD_SERIAL;
}
static inline uint64_t gvls_record_delta(uint64_t record) { return record >> GVLS_RECORD_DELTA_SHIFT; }

// The native threads' CPU time, sampled by the drain thread (never by the hook) every
// GVLS_CPU_SAMPLE_EVERY_NS while a trace runs: holds are wall time, and a hold that spans two
// samples ran on a CPU only for what its native thread's CPU time grew between them (the rest the
// OS kept it off a CPU: an overloaded machine, SIGSTOP). One record per native thread whose CPU
// time changed since its previous record: a native thread not listed has the CPU time of its
// previous record (idle threads cost no bytes).
#define GVLS_CPU_SAMPLE_EVERY_NS 100000000ull
typedef struct {
    uint64_t at_ns;           // when sampled, relative to start_monotonic_ns
    uint32_t count;           // records that follow
    uint32_t reserved;
} gvls_cpu_header;

typedef struct {
    uint32_t native_serial;   // as in gvls_events_header
    uint32_t reserved;
    uint64_t cpu_ns;          // the native thread's CPU time (CLOCK_THREAD_CPUTIME_ID's) at at_ns
} gvls_cpu_record;

// Thread table entry, followed by name_bytes of UTF-8 then created_at_bytes (no terminators).
typedef struct {
    uint32_t serial;
    uint32_t ractor_id;       // Ractor#id style: 1 is the main Ractor; 0 when unknown
    uint32_t flags;           // GVLS_THREAD_*
    uint32_t name_bytes;
    uint32_t created_at_bytes; // "app.rb:12" as Thread#inspect shows it, or 0 bytes (version 2)
} gvls_thread_record;

enum { GVLS_THREAD_MAIN = 1, GVLS_THREAD_EXITED = 2 };

typedef struct {
    uint64_t end_ns;          // relative to start_monotonic_ns
    uint64_t events;          // events recorded (written or still to be written at stop)
    uint64_t dropped;         // events lost because buffers were full or a write failed
    // Appended in version 2 (a reader takes the first 24 bytes of a longer record): the machine's
    // load, as holds are wall time and include the time the OS kept the holder off a CPU.
    uint32_t cpus;            // CPUs online at stop; 0 = unknown
    uint32_t load_max_milli;  // the highest 1-minute load average seen during the trace, x 1000; 0 = unknown
} gvls_end_record;

// The stacks chunk: the code locations a trace interned (ids from 1; 0 = no stack), written at
// stop (or in each flight recorder dump). Followed by location_count × (gvls_location_record,
// label, path) and stack_count × (u32 depth, depth × u32 location id, innermost first).
typedef struct {
    uint32_t location_count;
    uint32_t stack_count;
    uint64_t sites;           // release sites recorded
    uint64_t samples;         // holder samples recorded
    uint64_t dropped;         // stacks not recorded: tables full, or interned by another Ractor at that moment
    uint64_t unreadable;      // releases while others waited whose frames could not be read
} gvls_stacks_header;

typedef struct {
    uint32_t line;            // the line executing in that frame (the call site); 0 for C methods
    uint32_t label_bytes;     // rb_profile_frame_full_label: "IO#read", "Counter#spin", "block in <main>"
    uint32_t path_bytes;      // rb_profile_frame_path; empty for C methods
} gvls_location_record;

#endif
