// Starting and stopping a trace, for every sink: the order of operations that makes stopping safe
// (hook off first, then flush, then the drain thread, then the sink), and the drain thread.
#include "trace_session.h"
#include "clock.h"
#include "hook.h"
#include "thread_state.h"
#include "stacks.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/sysinfo.h>
#endif

#define T gvls_current_trace

// Read and written with the GVL, but for drain_stop (under T.lock: the drain thread reads it)
// and drain_running (stop_drain, maybe without the GVL: S.sink still keeps other starts out).
static struct {
    const gvls_sink *sink;     // from start until the end of stop: a trace runs or is stopping
    int drain_running, drain_stop;
    pthread_t drain;
    _Atomic uint32_t load_max_milli;  // the machine's highest 1-minute load seen: sample_load
    uint64_t load_sampled_ns;         // by the drain thread, or by start/stop when it does not run
} S;

#define LOAD_EVERY_NS 1000000000ull

// The machine's 1-minute load average, kept if the highest yet. Never from the hook: the drain
// thread (at most once a second), start and stop. sysinfo(2): no descriptor, no allocation.
static void sample_load(uint64_t now_ns) {
    S.load_sampled_ns = now_ns;
#ifdef __linux__
    struct sysinfo info;
    if (sysinfo(&info) != 0) return;
    uint32_t milli = (uint32_t)(((uint64_t)info.loads[0] * 1000) >> SI_LOAD_SHIFT);
    if (milli > atomic_load(&S.load_max_milli)) atomic_store(&S.load_max_milli, milli);
#endif
}

void gvls_session_machine(uint32_t *cpus, uint32_t *load_max_milli) {
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    *cpus = online > 0 ? (uint32_t)online : 0;
    *load_max_milli = atomic_load(&S.load_max_milli);
}

// The CPU time of the native thread whose kernel id is tid, or 0 when it is gone. A clock id made
// from the tid (the kernel's per-thread CPU clock, as glibc's pthread_getcpuclockid makes it:
// CPUCLOCK_PERTHREAD_MASK 4 | CPUCLOCK_SCHED 2, the tid's complement above 3 bits) rather than
// pthread_getcpuclockid: a lane outlives its native thread, whose pthread_t must not be used
// then, while the kernel answers EINVAL for a tid that is no thread of this process. One
// clock_gettime(2), no file: /proc/self/task/TID/schedstat costs open, read and close, and its
// run-queue delay misses a holder that is stopped or blocked without releasing the GVL.
static uint64_t native_cpu_ns(uint32_t tid) {
#ifdef __linux__
    clockid_t clock = (clockid_t)((~tid << 3) | 4 | 2);
    struct timespec ts;
    if (clock_gettime(clock, &ts) != 0) return 0;
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
#else
    (void)tid;
    return 0;
#endif
}

// A CPU chunk (format.h, file bytes): each lane's native thread whose CPU time changed since it
// was last written, at now_ns. Without T.lock: lanes are only ever prepended to the list, and
// freed after the drain thread is gone. NULL when memory is short (that sample is skipped).
static gvls_chunk *cpu_chunk(gvls_lane *lanes, uint64_t now_ns) {
    size_t lane_count = 0;
    for (gvls_lane *lane = lanes; lane; lane = lane->next) lane_count++;
    size_t fixed = sizeof(gvls_chunk_header) + sizeof(gvls_cpu_header);
    gvls_chunk *chunk = malloc(offsetof(gvls_chunk, records) + fixed + lane_count * sizeof(gvls_cpu_record));
    if (!chunk) return NULL;
    memset(chunk, 0, offsetof(gvls_chunk, records));
    chunk->compact = GVLS_CHUNK_PREFORMATTED;
    char *bytes = (char *)chunk->records;
    uint32_t count = 0;
    for (gvls_lane *lane = lanes; lane; lane = lane->next) {
        uint64_t cpu_ns = native_cpu_ns(lane->native_tid);
        if (!cpu_ns || cpu_ns == lane->cpu_listed_ns) continue;
        lane->cpu_listed_ns = cpu_ns;
        gvls_cpu_record record = { .native_serial = lane->native_serial, .cpu_ns = cpu_ns };
        memcpy(bytes + fixed + count++ * sizeof(record), &record, sizeof(record));
    }
    gvls_cpu_header header = { .at_ns = now_ns - T.start_ns, .count = count };
    gvls_chunk_header framing = { GVLS_CHUNK_CPU, (uint32_t)(sizeof(header) + count * sizeof(gvls_cpu_record)) };
    memcpy(bytes, &framing, sizeof(framing));
    memcpy(bytes + sizeof(framing), &header, sizeof(header));
    chunk->preformatted_bytes = (uint32_t)sizeof(framing) + framing.payload_bytes;
    return chunk;
}

// Under T.lock: waits until a chunk is queued, stop is asked, or (cpu samples) until due_ns.
static void wait_for_work(const gvls_sink *sink, uint64_t now_ns, uint64_t due_ns) {
    if (!sink->cpu_samples) { pthread_cond_wait(&T.wake_drain, &T.lock); return; }
    uint64_t at = gvls_monotonic_ns() + (due_ns > now_ns ? due_ns - now_ns : 0);  // wake_drain's clock
    struct timespec deadline = { .tv_sec = (time_t)(at / 1000000000ull), .tv_nsec = (long)(at % 1000000000ull) };
    pthread_cond_timedwait(&T.wake_drain, &T.lock, &deadline);
}

// wake_drain on CLOCK_MONOTONIC: the drain thread's timed waits (CPU samples) must not move with
// the wall clock.
static void init_wake_drain(void) {
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&T.wake_drain, &attr);
    pthread_condattr_destroy(&attr);
}

// Takes the queue under T.lock, hands each batch to the sink without it (a file sink blocks in
// write(2)), puts back in the pool what the sink returns. Stops once asked and the queue is
// empty, so everything sealed before the stop reaches the sink. For a sink that takes them, also
// wakes every GVLS_CPU_SAMPLE_EVERY_NS to sample the native threads' CPU time (after the batch
// it had: a chunk per sample, whatever the events).
static void (*tick_fn)(void);
void gvls_session_on_tick(void (*fn)(void)) { tick_fn = fn; }

static void *drain_main(void *arg) {
    const gvls_sink *sink = arg;
    uint64_t cpu_due_ns = T.start_ns + GVLS_CPU_SAMPLE_EVERY_NS;  // the first sample: gvls_session_start
    pthread_mutex_lock(&T.lock);
    for (;;) {
        gvls_chunk *batch = gvls_trace_take_queue();
        uint64_t now_ns = gvls_now_ns();
        gvls_lane *lanes = T.lanes;
        int sample_cpu = sink->cpu_samples && now_ns >= cpu_due_ns && !S.drain_stop;
        if (!batch && !sample_cpu) {
            if (S.drain_stop) break;
            wait_for_work(sink, now_ns, cpu_due_ns);
            continue;
        }
        pthread_mutex_unlock(&T.lock);
        if (sample_cpu) {
            cpu_due_ns = now_ns + GVLS_CPU_SAMPLE_EVERY_NS;
            gvls_chunk *cpu = cpu_chunk(lanes, now_ns), **tail = &batch;
            while (*tail) tail = &(*tail)->next;
            if (cpu) { cpu->next = NULL; *tail = cpu; }
            if (tick_fn) tick_fn();
        }
        gvls_chunk *done = batch ? sink->consume(batch) : NULL;
        if (now_ns - S.load_sampled_ns >= LOAD_EVERY_NS) sample_load(now_ns);
        pthread_mutex_lock(&T.lock);
        for (gvls_chunk *chunk = done, *next; chunk; chunk = next) {
            next = chunk->next;
            gvls_trace_recycle(chunk);
        }
    }
    pthread_mutex_unlock(&T.lock);
    return NULL;
}

static void *stop_drain(void *unused) {
    gvls_session_test_nogvl_delay();
    if (!S.drain_running) return NULL;
    pthread_mutex_lock(&T.lock);
    S.drain_stop = 1;
    pthread_cond_signal(&T.wake_drain);
    pthread_mutex_unlock(&T.lock);
    pthread_join(S.drain, NULL);
    S.drain_running = 0;
    return NULL;
}

unsigned gvls_session_test_nogvl_delay_us;

void gvls_session_test_nogvl_delay(void) {
    if (gvls_session_test_nogvl_delay_us) usleep(gvls_session_test_nogvl_delay_us);
}

void gvls_session_check_idle(void) {
    if (S.sink) rb_raise(rb_eRuntimeError, "a trace is already running");
}

size_t gvls_session_check_args(VALUE max_buffer_bytes, size_t min_chunks, VALUE threads) {
    size_t max_chunks = NUM2SIZET(max_buffer_bytes) / sizeof(gvls_chunk);
    if (max_chunks < min_chunks) rb_raise(rb_eArgError, "buffer too small: at least %zu bytes", min_chunks * sizeof(gvls_chunk));
    Check_Type(threads, T_ARRAY);
    return max_chunks;
}

int gvls_session_start(const gvls_sink *sink, VALUE threads, size_t max_chunks, uint64_t start_ns, int stacks) {
    gvls_threads_prune_dead();
    // Threads that already exist get their slots now, so the table names them even if they
    // never fire an event during the trace.
    for (long i = 0; i < RARRAY_LEN(threads); i++) gvls_thread_for(RARRAY_AREF(threads, i));

    gvls_stacks_free();  // a trace without stacks carries no tables
    if (stacks && gvls_stacks_start()) return ENOMEM;
    gvls_trace_buffers_reset(max_chunks);
    T.start_ns = start_ns;
    atomic_store(&S.load_max_milli, 0);
    sample_load(start_ns);
    S.drain_stop = 0;
    int err = pthread_create(&S.drain, NULL, drain_main, (void *)sink);
    if (err) { gvls_stacks_pause(); gvls_stacks_free(); return err; }
    S.drain_running = 1;
    if (sink->cpu_samples) {
        // The first CPU sample, at time 0 (no lane yet: an empty one), before any event: every
        // such trace has one, however soon it stops.
        gvls_chunk *first = cpu_chunk(NULL, start_ns);
        pthread_mutex_lock(&T.lock);
        if (first) gvls_trace_queue_locked(first);
        pthread_mutex_unlock(&T.lock);
    }
    S.sink = sink;
    gvls_threads_table_open(1);
    atomic_store(&T.active, 1);  // after the generation bump (release): see gvls_trace_record
    gvls_hook_install();
    return 0;
}

int gvls_session_running(const gvls_sink *sink) {
    return S.sink == sink && atomic_load(&T.active);
}

static VALUE stop_drain_without_gvl(VALUE unused) {
    rb_thread_call_without_gvl(stop_drain, NULL, NULL, NULL);
    return Qnil;
}

static VALUE finish_sink(VALUE end_ns) {
    return S.sink->finish(NUM2ULL(end_ns));
}

VALUE gvls_session_stop(void) {
    atomic_store(&T.active, 0);
    gvls_hook_remove();             // waits for callbacks in flight: nobody appends after this
    gvls_hook_sync();               // back on at once if metrics still need it (they write no lanes)
    gvls_stacks_pause();            // no more samples; the tables stay for the sink's finish
    uint64_t end_ns = gvls_now_ns();
    gvls_trace_buffers_flush();
    // A file's drain may be blocked on a slow disk or a pipe that a Ruby thread of this process
    // drains: wait for it without the GVL, or that thread could never run. The ring's only waits
    // for T.lock: joined with the GVL, so no other Ruby thread sees the trace half stopped.
    // The wait has no unblock function: it always finishes, but an interrupt (Thread#raise,
    // Timeout, Ctrl-C) is raised as it returns. From here to the end nothing may escape, or the
    // trace stays half stopped and every later start is refused: the first exception is kept,
    // the wait retried until the drain thread is gone, the sink finished, and then it is raised.
    int state = 0, finish_state = 0;
    while (S.drain_running) {
        int wait_state = 0;
        if (S.sink->drain_can_block) rb_protect(stop_drain_without_gvl, Qnil, &wait_state);
        else stop_drain(NULL);
        if (wait_state && !state) state = wait_state;
    }
    VALUE errinfo = state ? rb_errinfo() : Qnil;
    rb_set_errinfo(Qnil);
    sample_load(gvls_now_ns());  // the drain thread is gone: the end record gets the load up to now
    VALUE result = rb_protect(finish_sink, ULL2NUM(end_ns), &finish_state);
    if (finish_state) S.sink->after_fork();  // what finishing would have let go of: the fd, the ring
    gvls_trace_buffers_free();
    gvls_stacks_free();
    S.sink = NULL;
    gvls_threads_table_open(0);
    gvls_threads_release_exited();  // the prune leaves slots still queued for release
    gvls_threads_prune_exited();
    gvls_threads_prune_dead();
    if (state) {
        rb_set_errinfo(errinfo);  // the interrupt's exception (or Thread#kill's marker), as caught
        rb_jump_tag(state);
    }
    if (finish_state) rb_jump_tag(finish_state);
    return result;
}

// The child inherits the parent's trace state but not its drain thread, and must not write the
// parent's events (the parent does). Locks other threads held at fork are reset.
int gvls_session_after_fork(void) {
    pthread_mutex_init(&T.lock, NULL);
    init_wake_drain();
    int was_tracing = atomic_exchange(&T.active, 0);
    if (S.sink) S.sink->after_fork();
    gvls_stacks_after_fork();
    S.sink = NULL;
    gvls_threads_table_open(0);
    S.drain_running = 0;
    gvls_trace_buffers_free();
    return was_tracing;
}

// Native.trace_active?: true while any trace records, the flight recorder's included.
static VALUE trace_active_p(VALUE self) {
    return atomic_load(&T.active) ? Qtrue : Qfalse;
}

// While a trace records, exited threads keep their slots: its thread table lists them (the
// registry is told through a listener, being below the trace).
static int keeps_slot(const gvls_thread *slot) {
    return atomic_load(&T.active);
}

static const gvls_slot_listener slot_listener = { .keeps = keeps_slot };

void gvls_trace_session_init(VALUE mNative) {
    init_wake_drain();
    gvls_threads_listen(&slot_listener);
    rb_define_singleton_method(mNative, "trace_active?", trace_active_p, 0);
}
