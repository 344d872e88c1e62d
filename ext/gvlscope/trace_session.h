// The one start/stop sequence of a trace, whatever receives its events. A trace records into the
// lanes (trace.h); one drain thread hands the sealed chunks to the trace's sink. A sink is what
// the chunks become: sink_file.c writes them to a .gvl file, sink_ring.c keeps the newest in
// memory (the flight recorder). The session knows a sink only through this struct, and sinks
// never call each other.
#ifndef GVLSCOPE_TRACE_SESSION_H
#define GVLSCOPE_TRACE_SESSION_H

#include "trace.h"

typedef struct gvls_sink {
    // On the drain thread, without T.lock: takes a batch of sealed chunks (linked by next) and
    // returns those to give back to the pool (the rest it keeps, or gave back itself).
    gvls_chunk *(*consume)(gvls_chunk *batch);
    // Whether consume can block (on a disk or a pipe): then stopping waits without the GVL.
    int drain_can_block;
    // Whether consume takes the native threads' CPU time samples (a GVLS_CHUNK_PREFORMATTED
    // chunk of type GVLS_CHUNK_CPU, format.h) the drain thread makes every GVLS_CPU_SAMPLE_EVERY_NS.
    int cpu_samples;
    // With the GVL, once the drain thread has consumed everything and exited, before the buffers
    // are freed; end_ns is when the hook went off. Its result is gvls_session_stop's.
    VALUE (*finish)(uint64_t end_ns);
    // In a forked child whose parent ran this sink, or when finish raised: drop what it holds
    // (no Ruby calls).
    void (*after_fork)(void);
} gvls_sink;

// Raises "a trace is already running" unless no trace (of any sink) runs or is stopping.
void gvls_session_check_idle(void);
// Checks a start's arguments: the buffer must hold min_chunks chunks (ArgumentError), threads
// must be an Array. Returns how many chunks the buffer holds.
size_t gvls_session_check_args(VALUE max_buffer_bytes, size_t min_chunks, VALUE threads);
// Starts a trace into sink: existing threads get their slots, buffers are reset, the drain
// thread starts, the hook goes on. start_ns is the trace's time 0. Returns 0, or the errno of
// pthread_create (then nothing runs and the caller raises). The sink is set up before.
// stacks: also record code locations (stacks.h). Returns ENOMEM if their tables cannot be had.
int gvls_session_start(const gvls_sink *sink, VALUE threads, size_t max_chunks, uint64_t start_ns, int stacks);
// True while a trace into sink records.
int gvls_session_running(const gvls_sink *sink);
// fn runs on the drain thread (no GVL: no Ruby, only what is safe from any thread) at each of a
// file trace's CPU samples, every GVLS_CPU_SAMPLE_EVERY_NS (fibers.c asks for a long turn's code).
void gvls_session_on_tick(void (*fn)(void));
// Stops the running trace (check gvls_session_running first); returns sink->finish's result.
VALUE gvls_session_stop(void);
// The machine, for a trace's end record: CPUs online now, and the highest 1-minute load average
// seen since the trace started (sampled at start, by the drain thread, at stop); 0 = unknown.
void gvls_session_machine(uint32_t *cpus, uint32_t *load_max_milli);
// Test-only: sleeps gvls_session_test_nogvl_delay_us (set by debug.c, 0 otherwise) in the no-GVL
// waits of stop and dump. Here, not in debug.c: nothing but the Init file uses the test-only file.
extern unsigned gvls_session_test_nogvl_delay_us;
void gvls_session_test_nogvl_delay(void);
// In a forked child: forgets the parent's trace (and its sink's state), resets T's lock. Returns
// whether a trace was recording.
int gvls_session_after_fork(void);

#endif
