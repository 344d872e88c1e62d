// GVLScope::RequestTiming: one web request's run / GVL-wait / idle / GC time for the thread that
// handled it, as deltas of that thread's metrics counters. In C because GVLScope::Rack makes one
// per request: one object, no arrays, no thread-variable lookups, the Server-Timing value
// formatted by hand (the Ruby version cost a server ~3 us per request).
#include "gvlscope.h"
#include "request_timing.h"
#include "clock.h"
#include "metrics.h"
#include "handoff.h"
#include "fibers.h"
#include <ruby/io.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

// The thread's counters a request takes deltas of (metrics.h's GVLS_NOW_COUNTERS). OVERLAP: the GVL
// wait that IO the request had started overlapped (docs/metrics.md, io_overlap_wait_ns).
enum { RUN = GVLS_NOW_RUN, WAIT = GVLS_NOW_WAIT, IDLE = GVLS_NOW_IDLE, GC = GVLS_NOW_GC, COUNTERS = GVLS_COUNTERS_NOW };

typedef struct {
    VALUE thread;
    VALUE fiber;              // on a loop's task: the request's fiber, whose own time it counts (fibers.c), else 0
    uint64_t started_ns, duration_ns;
    uint64_t before[COUNTERS], delta[COUNTERS];
    uint64_t pickup_wait_ns;  // waited for the GVL between the thread's previous request and this one
    uint64_t arrival_ns;      // when the work reached the process (a hand-off's stamp), 0 if unknown
    int pickup_exact;         // pickup_wait_ns counts every wait since arrival_ns (else: at least that)
    uint64_t blocked_before_start_ns;  // idle between taking the work and starting it (locks, IO on the way)
    uint64_t thread_wait_ns;  // handed over while this thread still ran its previous request: waited for a free thread
    uint64_t cpu_wait_ns;     // handed over while it slept: from the hand-off until it ran (woken, given a core)
    int loop_known;           // ran on a task of an event loop, and a wait of it for the loop was measured:
    uint64_t queue_loop_ns;   // ...from the arrival until its turn began, but the GVL waits in between (fibers.c)
    uint64_t loop_wait_ns;    // ...that, and (once finished) its waits for the loop after its start
    int finished;
    int header_added;  // the Server-Timing value is in the response's headers: never added twice
    int queue_latency_known;
    uint64_t queue_latency_ns;  // a job's: from its enqueued_at (wall clock) to its start (#enqueued_at=)
} request_timing;

static void timing_mark(void *ptr) {
    request_timing *timing = ptr;
    rb_gc_mark(timing->thread);
    if (timing->fiber) rb_gc_mark(timing->fiber);
}
static size_t timing_size(const void *ptr) { return sizeof(request_timing); }

static const rb_data_type_t timing_type = {
    .wrap_struct_name = "GVLScope::RequestTiming",
    .function = { .dmark = timing_mark, .dfree = RUBY_TYPED_DEFAULT_FREE, .dsize = timing_size },
    // Embeddable: the struct lives in the object's own slot, no malloc and free per request.
    .flags = RUBY_TYPED_FREE_IMMEDIATELY | RUBY_TYPED_WB_PROTECTED | RUBY_TYPED_EMBEDDABLE,
};

static VALUE timing_alloc(VALUE klass) {
    request_timing *timing;
    return TypedData_Make_Struct(klass, request_timing, &timing_type, timing);
}

// rb_check_typeddata's checks inline (it runs three times per web request), the call only to raise.
static inline request_timing *timing_of(VALUE self) {
    if (RB_LIKELY(RB_TYPE_P(self, T_DATA) && RTYPEDDATA_P(self) && RTYPEDDATA_TYPE(self) == &timing_type))
        return RTYPEDDATA_GET_DATA(self);
    return rb_check_typeddata(self, &timing_type);
}

static gvls_thread *slot_of(VALUE thread) {
    if (!rb_obj_is_kind_of(thread, rb_cThread)) rb_raise(rb_eTypeError, "expected a Thread, got %"PRIsVALUE, rb_obj_class(thread));
    // As Native.metrics_thread: a slot is made only for the caller's own thread (a slot made for
    // an exited thread would never see EXITED, so would never be freed).
    return thread == rb_thread_current() ? gvls_thread_for(thread) : gvls_thread_find(thread);
}

static uint64_t minus(uint64_t later, uint64_t earlier) { return later > earlier ? later - earlier : 0; }

// Where each thread's last request ended (its metrics' wait_ns then), by its slot's index: this
// file's, not a field of the slot (the thread state is below its consumers). C methods of this
// extension run on the main Ractor only, with its GVL: the table needs no lock.
typedef struct { int known; uint64_t wait_ns, ended_ns; } request_end;
static request_end *ends;
static size_t ends_capa;

// The slot's entry; NULL if it has none yet and grow is 0, or if there is no memory for it.
static request_end *end_of(const gvls_thread *slot, int grow) {
    if (RB_LIKELY(slot->index < ends_capa)) return &ends[slot->index];
    if (!grow) return NULL;
    size_t capa = ends_capa ? ends_capa : 64;
    while (capa <= slot->index) capa *= 2;
    request_end *grown = realloc(ends, capa * sizeof(*grown));
    if (!grown) return NULL;
    memset(grown + ends_capa, 0, (capa - ends_capa) * sizeof(*grown));
    ends = grown;
    ends_capa = capa;
    return &ends[slot->index];
}

// A freed slot's index goes to a new thread, which finished no request.
static void slot_freed(gvls_thread *slot) {
    request_end *end = end_of(slot, 0);
    if (end) end->known = 0;
}

static const gvls_slot_listener slot_listener = { .freed = slot_freed };

// On an event loop's task (fibers.c), connection fd's request: it waited for the loop from its bytes'
// arrival until its task's turn began, and for the GVL meanwhile (the loop's thread beside others).
// The arrival is the kernel's for the bytes, to a jiffy; the loop's return from its select, when
// that came within a jiffy of it (the loop was idle when they came, and they woke it: exact); else
// the kernel's a jiffy late, a lower bound (the loop was busy with other turns when they came, and
// its next select returned at once, long after: never charged to the request as its arrival).
// Returns 0 when either is unknown (not TCP; tracking just began).
static int loop_wait_of(request_timing *timing, gvls_thread *slot, int fd) {
    gvls_loop_turn turn;
    if (!gvls_fibers_turn(slot, &turn)) return 0;
    uint64_t data_ns = gvls_kernel_data_arrival_ns(fd, timing->started_ns);
    if (!data_ns) return 0;
    uint64_t arrival_ns = gvls_fibers_arrival_ns(data_ns, turn.loop_woke_ns);
    if (arrival_ns > turn.started_ns) arrival_ns = turn.started_ns;  // came during its own turn
    int exact;
    uint64_t wait_since_arrival = gvls_metrics_own_wait_since(slot, arrival_ns, timing->started_ns, &exact, NULL);
    uint64_t wait_since_turn = gvls_metrics_own_wait_since(slot, turn.started_ns, timing->started_ns, NULL, NULL);
    timing->queue_loop_ns = timing->loop_wait_ns = minus(turn.started_ns - arrival_ns, minus(wait_since_arrival, wait_since_turn));
    timing->pickup_wait_ns = wait_since_arrival;
    timing->pickup_exact = exact;
    timing->arrival_ns = arrival_ns;
    timing->loop_known = 1;
    return 1;
}

// handed_fd: the connection whose hand-off the current thread claims (handoff.c), or -1. loop_fd:
// the connection of a request on an event loop's task (fibers.c), or -1. env: the Rack env whose
// connection is looked up only when the thread waited since its previous request (Qnil: none).
static VALUE start(VALUE self, request_timing *timing, VALUE thread, gvls_thread *slot, int handed_fd, int loop_fd,
                   VALUE env) {
    RB_OBJ_WRITE(self, &timing->thread, thread);
    timing->started_ns = gvls_now_ns();
    if (slot && RB_UNLIKELY(gvls_fibers_requests) && thread == rb_thread_current() && gvls_fibers_on_task()) {
        // On a loop's task: its thread's previous request was another fiber's, so the pickup is
        // only the wait since its bytes came (when known), and its numbers are its own fiber's.
        if (loop_fd >= 0) loop_wait_of(timing, slot, loop_fd);
        gvls_metrics_counters_now(slot, timing->started_ns, timing->before, NULL);
        if (gvls_fibers_own_start(slot, timing->before)) RB_OBJ_WRITE(self, &timing->fiber, rb_fiber_current());
        gvls_metrics_request_started(slot);
    } else if (slot) {
        uint64_t wait_at_wake;
        gvls_metrics_counters_now(slot, timing->started_ns, timing->before, &wait_at_wake);
        // The pickup is the wait since the later of two points: the end of the thread's previous
        // request, and its last return from idle (a server thread woken for this request). A
        // thread that did other work between requests (waited beside a CPU hog, then slept) does
        // not bring that wait in; a pool thread's first request brings the wait since it was woken.
        // With neither known (no request and no wake since counting began) it is left out.
        int woke = wait_at_wake != GVLS_NEVER_WOKE;
        gvls_handoff ticket;
        const request_end *end = end_of(slot, 0);
        int current = handed_fd >= 0 || thread == rb_thread_current();
        if (current && (handed_fd >= 0 ? gvls_handoff_claim(slot, handed_fd, timing->started_ns, &ticket)
                                       : gvls_handoff_take(slot, &ticket))) {
            // Handed over (handoff.c): the wait from the work's arrival, on every thread it went
            // through, across the locks taken on the way. The thread's own starts at the hand-off.
            // Its time blocked between taking the work and starting it counts too: the runner's own
            // locks and log writes (a job logger's Monitor, held by a thread that itself waits for
            // the GVL beside CPU-bound work). The GVL's counters cannot tell whose wait a lock's is,
            // so it is also kept apart (blocked_before_start_ns), an upper bound on that part.
            timing->blocked_before_start_ns = minus(timing->before[IDLE], ticket.idle_base_ns);
            // Handed over while this thread still ran its previous request (every pool thread
            // busy): its waits until that request ended were that request's, counted there; from
            // the hand-off to then, the work waited for a free thread.
            uint64_t own_base_ns = ticket.wait_base_ns;
            if (end && end->known && end->ended_ns > ticket.handoff_ns) {
                if (end->wait_ns > own_base_ns) own_base_ns = end->wait_ns;
                timing->thread_wait_ns = end->ended_ns - ticket.handoff_ns;
            } else if (ticket.woke_ns > ticket.handoff_ns) {
                // Asleep at the hand-off (a pool thread waiting for work): until it ran again, the
                // kernel woke it and it waited for a CPU core (its wake is its first READY: the GVL
                // wait after it is pickup_wait_ns's).
                timing->cpu_wait_ns = ticket.woke_ns - ticket.handoff_ns;
            }
            timing->pickup_wait_ns = ticket.carried_wait_ns + minus(timing->before[WAIT], own_base_ns) +
                                     timing->blocked_before_start_ns;
            timing->arrival_ns = ticket.arrival_ns;
            timing->pickup_exact = ticket.exact;
        } else if ((end && end->known) || woke) {
            uint64_t from = end && end->known ? end->wait_ns : 0;
            if (woke && wait_at_wake > from) from = wait_at_wake;
            timing->pickup_wait_ns = minus(timing->before[WAIT], from);
            // A connection with no hand-off to claim (Puma served a kept-alive connection's next
            // request on this thread, its bytes already read): its bytes may have come after that
            // point, while the thread still waited behind the previous response (beside a CPU hog).
            // Only the waits since they came are its, counted from the end of the kernel's jiffy (a
            // lower bound: the wait that began in that jiffy was the write's of the response, which
            // the client had to read before it sent these bytes). Puma 8 serves the next request on
            // the same thread when its bytes are there after the response (Server#process_client).
            // The connection is looked up only when there is a wait to clip (most requests: none).
            int fd = !timing->pickup_wait_ns ? -1 : handed_fd >= 0 ? handed_fd : gvls_handoff_fd_of_env(env);
            uint64_t data_ns = fd >= 0 ? gvls_kernel_data_arrival_ns(fd, timing->started_ns) : 0;
            if (data_ns) {
                uint64_t since = gvls_metrics_own_wait_since(slot, data_ns + GVLS_KERNEL_SLACK_NS, timing->started_ns, NULL, NULL);
                if (since < timing->pickup_wait_ns) timing->pickup_wait_ns = since;
            }
        }
        // IO the thread started before the request (a response's write) is not the request's.
        if (current) gvls_metrics_request_started(slot);
    }
    return self;
}

// RequestTiming.new(thread = Thread.current): the request starts now.
static VALUE timing_initialize(int argc, VALUE *argv, VALUE self) {
    rb_check_arity(argc, 0, 1);
    VALUE thread = argc > 0 ? argv[0] : rb_thread_current();
    return start(self, timing_of(self), thread, slot_of(thread), -1, -1, Qnil);
}

// RequestTiming.start(thread = Thread.current): new without Class#new's dispatch to initialize,
// which is a good part of the middleware's cost per request. Without a thread (GVLScope::Rack),
// the current one: nothing to check.
static VALUE cRequestTiming;

static VALUE start_current(VALUE klass, int handed_fd, int loop_fd, VALUE env) {
    request_timing *timing;
    VALUE self = TypedData_Make_Struct(klass, request_timing, &timing_type, timing);
    VALUE thread = rb_thread_current();
    return start(self, timing, thread, gvls_thread_for(thread), handed_fd, loop_fd, env);
}

static VALUE timing_start(int argc, VALUE *argv, VALUE klass) {
    if (argc > 0) return timing_initialize(argc, argv, timing_alloc(klass));
    return start_current(klass, -1, -1, Qnil);
}

// For breakdown.c's RackRequests#start: a RequestTiming of the current thread, started now, which
// claims connection handed_fd's hand-off, or waited for its event loop since connection loop_fd's
// bytes came (-1: none); env: the request's Rack env, whose connection clips a wait since the
// thread's previous request at its bytes' arrival.
VALUE gvls_request_timing_start_current(int handed_fd, int loop_fd, VALUE env) {
    return start_current(cRequestTiming, handed_fd, loop_fd, env);
}

// slot: gvls_thread_find(timing->thread), NULL when the thread has exited since.
// *loop_wait_after_ns: a fiber's waits for its loop since the start (0 on a thread).
static void deltas_of(const request_timing *timing, const gvls_thread *slot, uint64_t now_ns, uint64_t out[COUNTERS],
                      uint64_t *loop_wait_after_ns) {
    *loop_wait_after_ns = 0;
    if (timing->fiber && gvls_fibers_own_counters(timing->fiber, slot, now_ns, out, loop_wait_after_ns)) {
        // Its fiber's own stretches, and its waits while ready; the rest of its time its fiber was
        // suspended, waiting: idle (its IO, its sleep, or IO whose readiness is not known).
        uint64_t accounted_ns = out[RUN] + out[WAIT] + out[GC] + *loop_wait_after_ns;
        out[IDLE] = minus(minus(now_ns, timing->started_ns), accounted_ns);
    } else {
        uint64_t now[COUNTERS] = { 0 };
        if (slot) gvls_metrics_counters_now(slot, now_ns, now, NULL);
        for (int i = 0; i < COUNTERS; i++) out[i] = minus(now[i], timing->before[i]);
    }
    out[WAIT] += timing->pickup_wait_ns;
}

static void deltas_now(const request_timing *timing, uint64_t now_ns, uint64_t *out, uint64_t *loop_wait_after_ns) {
    deltas_of(timing, gvls_thread_find(timing->thread), now_ns, out, loop_wait_after_ns);
}

// Freezes the numbers at the end of the app call; the thread's next request measures its pickup from here.
static void finish(request_timing *timing) {
    if (timing->finished) return;
    uint64_t now_ns = gvls_now_ns();
    gvls_thread *slot = gvls_thread_find_fast(timing->thread);
    uint64_t loop_wait_after_ns;
    deltas_of(timing, slot, now_ns, timing->delta, &loop_wait_after_ns);
    timing->loop_wait_ns += loop_wait_after_ns;
    if (loop_wait_after_ns) timing->loop_known = 1;
    timing->duration_ns = minus(now_ns, timing->started_ns);
    if (timing->fiber) gvls_fibers_own_stop(timing->fiber);
    // A fiber's request ends nothing of its thread's: the next one's pickup is its own loop wait.
    request_end *end = slot && !timing->fiber ? end_of(slot, 1) : NULL;
    if (end) {
        end->wait_ns = timing->before[WAIT] + timing->delta[WAIT] - timing->pickup_wait_ns;
        end->ended_ns = now_ns;
        end->known = 1;
    }
    timing->finished = 1;  // not frozen: freezing moves the object to another shape, ~150 instructions
}

static VALUE timing_finish(VALUE self) {
    finish(timing_of(self));
    return self;
}

static VALUE timing_finished_p(VALUE self) { return timing_of(self)->finished ? Qtrue : Qfalse; }

static VALUE timing_thread(VALUE self) { return timing_of(self)->thread; }

// loop_wait_ns: waited for its event loop: from its arrival until the loop gave its task the thread,
// but the GVL waits in between (gvl-wait's); 0 when not on a loop's task, or when the arrival was
// not known.

// Whether the request ran on an event loop's task and loop_wait_ns was measured.
static VALUE timing_loop_wait_known_p(VALUE self) { return timing_of(self)->loop_known ? Qtrue : Qfalse; }

// Before the request started: from the work's arrival (a server thread's wake for the connection,
// a job fetch's) to the start, nil when no hand-off told the arrival.
static VALUE timing_queue_ns(VALUE self) {
    request_timing *timing = timing_of(self);
    return timing->arrival_ns ? ULL2NUM(minus(timing->started_ns, timing->arrival_ns)) : Qnil;
}

// timing.enqueued_at = job["enqueued_at"]: when the job was put in its queue, read as Sidekiq reads it
// (Sidekiq::JobRecord#enqueued_at): an Integer is milliseconds since the epoch (Sidekiq 8), a Float
// seconds (Sidekiq 7); anything else (or a time before 1970 or after 2262, which ns since the epoch
// cannot hold) leaves the queue latency unknown. The latency runs from then
// to this call (made right after the start), both on the wall clock: the pusher's host read the
// first, so a pusher whose clock is ahead of ours would make it negative, and it counts 0 then.
static VALUE timing_set_enqueued_at(VALUE self, VALUE enqueued_at) {
    request_timing *timing = timing_of(self);
    const int64_t max_ms = INT64_MAX / 1000000;
    int64_t enqueued_ns = -1;
    if (FIXNUM_P(enqueued_at)) {
        long ms = FIX2LONG(enqueued_at);
        if (ms >= 0 && ms < max_ms) enqueued_ns = (int64_t)ms * 1000000;
    } else if (RB_FLOAT_TYPE_P(enqueued_at)) {
        double seconds = RFLOAT_VALUE(enqueued_at);  // NaN fails both comparisons
        if (seconds >= 0 && seconds < max_ms / 1000) enqueued_ns = (int64_t)(seconds * 1e9);
    }
    if (enqueued_ns < 0) {
        timing->queue_latency_known = 0;
        timing->queue_latency_ns = 0;
        return enqueued_at;
    }
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    int64_t latency_ns = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec - enqueued_ns;
    timing->queue_latency_ns = latency_ns > 0 ? (uint64_t)latency_ns : 0;
    timing->queue_latency_known = 1;
    return enqueued_at;
}

// A job's time in its queue before it started (#enqueued_at=), nil when not told.
static VALUE timing_queue_latency_ns(VALUE self) {
    request_timing *timing = timing_of(self);
    return timing->queue_latency_known ? ULL2NUM(timing->queue_latency_ns) : Qnil;
}

// Idle between taking the handed-over work and starting it: blocked on the way (a lock whose holder
// may have waited for the GVL, a log write), nil when no hand-off told it.
static VALUE timing_blocked_before_start_ns(VALUE self) {
    request_timing *timing = timing_of(self);
    return timing->arrival_ns ? ULL2NUM(timing->blocked_before_start_ns) : Qnil;
}

// From the hand-off until a thread was free to take the work (every pool thread busy with a
// request), nil when no hand-off told it.
static VALUE timing_queue_thread_ns(VALUE self) {
    request_timing *timing = timing_of(self);
    return timing->arrival_ns ? ULL2NUM(timing->thread_wait_ns) : Qnil;
}

// From the hand-off until the thread that took the work ran (it slept waiting for work: the
// kernel's wake-up and the wait for a CPU core), nil when no hand-off told it.
static VALUE timing_queue_cpu_ns(VALUE self) {
    request_timing *timing = timing_of(self);
    return timing->arrival_ns ? ULL2NUM(timing->cpu_wait_ns) : Qnil;
}

// Whether pickup_wait_ns saw every wait since the arrival (false: more waits than the threads'
// wait logs hold came in between, and it is a lower bound).
static VALUE timing_pickup_exact_p(VALUE self) {
    request_timing *timing = timing_of(self);
    return timing->arrival_ns && !timing->pickup_exact ? Qfalse : Qtrue;
}

// deltas and the rest, each as request_timing.h's GVLS_REQUEST_FIELDS says.
static void put_values(const request_timing *timing, const uint64_t deltas[COUNTERS], uint64_t duration_ns,
                       uint64_t loop_wait_ns, uint64_t out[GVLS_REQUEST_VALUES]) {
#define PUT_VALUE(name, value, reader) out[GVLS_REQUEST_##name] = (value);
    GVLS_REQUEST_FIELDS(PUT_VALUE)
}

// For breakdown.c: a RequestTiming's numbers (so far if it is not finished) into out; 0 if obj is
// not a RequestTiming.
int gvls_request_timing_values(VALUE obj, uint64_t out[GVLS_REQUEST_VALUES]) {
    if (!rb_typeddata_is_kind_of(obj, &timing_type)) return 0;
    request_timing *timing = timing_of(obj);
    if (timing->finished) {
        put_values(timing, timing->delta, timing->duration_ns, timing->loop_wait_ns, out);
    } else {
        uint64_t now_ns = gvls_now_ns(), deltas[COUNTERS], loop_wait_after_ns;
        deltas_now(timing, now_ns, deltas, &loop_wait_after_ns);
        put_values(timing, deltas, minus(now_ns, timing->started_ns), timing->loop_wait_ns + loop_wait_after_ns, out);
    }
    return 1;
}

// RequestTiming#run_ns, #wait_ns, ...: one of GVLS_REQUEST_FIELDS' values, the numbers so far
// inside the app (before finish!).
#define VALUE_READER(name, value, reader) VALUE_READER_##reader(name)
#define VALUE_READER_READER(name)                                                                    \
    static VALUE timing_##name(VALUE self) {                                                         \
        uint64_t values[GVLS_REQUEST_VALUES];                                                        \
        gvls_request_timing_values(self, values);                                                    \
        return ULL2NUM(values[GVLS_REQUEST_##name]);                                                 \
    }
#define VALUE_READER_OWN_READER(name)
GVLS_REQUEST_FIELDS(VALUE_READER)

// Appends ns as milliseconds rounded to the microsecond, without trailing zeros: "12.345", "0.09",
// "72", "0". By hand: snprintf's "%.3f" of four doubles was half of the middleware's cost per request.
static char *put_ms(char *out, uint64_t us) {
    char digits[24];
    int n = 0;
    uint64_t whole = us / 1000;
    do { digits[n++] = (char)('0' + whole % 10); whole /= 10; } while (whole);
    while (n) *out++ = digits[--n];
    unsigned fraction = (unsigned)(us % 1000);
    if (fraction) {
        *out++ = '.';
        *out++ = (char)('0' + fraction / 100);
        if (fraction % 100) {
            *out++ = (char)('0' + fraction / 10 % 10);
            if (fraction % 10) *out++ = (char)('0' + fraction % 10);
        }
    }
    return out;
}

static char *put_text(char *out, const char *text) {
    while (*text) *out++ = *text++;
    return out;
}

static uint64_t rounded_us(uint64_t ns) { return (ns + 500) / 1000; }

// The W3C Server-Timing value, as short as its content allows (Puma's work for the header grows
// with its length: docs/performance.md): "gvl-wait;dur=0.094, gvl-run;dur=0.009", then
// ", idle;dur=…" and ", gc;dur=…" only when they are not zero (to the microsecond). Durations in ms.
static VALUE timing_server_timing(VALUE self) {
    request_timing *timing = timing_of(self);
    uint64_t values[COUNTERS], loop_wait_ns = timing->loop_wait_ns, loop_wait_after_ns;
    if (timing->finished) memcpy(values, timing->delta, sizeof(values));
    else deltas_now(timing, gvls_now_ns(), values, &loop_wait_after_ns), loop_wait_ns += loop_wait_after_ns;
    char text[432];  // 10 names (140 chars) + 10 numbers of at most 21 + 10 separators
    char *end = text;
    end = put_ms(put_text(end, "gvl-wait;dur="), rounded_us(values[WAIT]));
    // On an event loop's task (Falcon, async): its wait for the loop, which the GVL's says nothing of.
    if (timing->loop_known) end = put_ms(put_text(end, ", loop-wait;dur="), rounded_us(loop_wait_ns));
    end = put_ms(put_text(end, ", gvl-run;dur="), rounded_us(values[RUN]));
    uint64_t idle_us = rounded_us(values[IDLE]), gc_us = rounded_us(values[GC]);
    if (idle_us) end = put_ms(put_text(end, ", idle;dur="), idle_us);
    if (gc_us) end = put_ms(put_text(end, ", gc;dur="), gc_us);
    // From the work's arrival to the app (a hand-off told it), when it took a millisecond or more:
    // the client's time before the app, of which gvl-wait has the GVL's part.
    // Its named parts follow it: the GVL's (waited for it on the way: part of gvl-wait too), a free
    // thread's (every pool thread was busy) or a CPU core's (the pool thread slept until woken and
    // run); the rest is the server's own Ruby and time the machine kept the threads before it off a
    // core (docs/web.md, "queue").
    uint64_t queue_ns = timing->arrival_ns ? minus(timing->started_ns, timing->arrival_ns) : 0;
    if (queue_ns >= 1000000) {
        end = put_ms(put_text(end, ", queue;dur="), rounded_us(queue_ns));
        end = put_ms(put_text(end, ", queue-gvl;dur="), rounded_us(timing->pickup_wait_ns));
        uint64_t thread_us = rounded_us(timing->thread_wait_ns), cpu_us = rounded_us(timing->cpu_wait_ns);
        if (thread_us) end = put_ms(put_text(end, ", queue-threads;dur="), thread_us);
        if (cpu_us) end = put_ms(put_text(end, ", queue-cpu;dur="), cpu_us);
        if (timing->loop_known) end = put_ms(put_text(end, ", queue-loop;dur="), rounded_us(timing->queue_loop_ns));
    }
    return rb_usascii_str_new(text, end - text);
}

static VALUE server_timing_key, server_timing_key_capitalized;

// timing.finish_response(response, add_header) -> response or nil
//
// GVLScope::Rack's common case in one call: finish the timing and, if add_header, add the
// Server-Timing value to the headers of the app's response in place. Under Puma the middleware's
// Ruby steps cost several thousand instructions per request, which is more than 2 % of a
// hello-world request. Returns nil when the response is not a plain, unfrozen
// [status, Hash, body] or already holds a header value that is not a String: the Ruby side then
// does it the general way.
static VALUE add_server_timing(VALUE self, VALUE response);

static VALUE timing_finish_response(VALUE self, VALUE response, VALUE add_header) {
    timing_finish(self);
    return RTEST(add_header) ? add_server_timing(self, response) : response;
}

// The header's part of finish_response, on a finished timing.
static VALUE add_server_timing(VALUE self, VALUE response) {
    if (timing_of(self)->header_added) return response;
    if (!RB_TYPE_P(response, T_ARRAY) || RARRAY_LEN(response) != 3 || OBJ_FROZEN(response)) return Qnil;
    VALUE headers = RARRAY_AREF(response, 1);
    if (!RB_TYPE_P(headers, T_HASH) || OBJ_FROZEN(headers)) return Qnil;
    VALUE key = server_timing_key;
    VALUE existing = rb_hash_lookup2(headers, key, Qundef);
    if (existing == Qundef) {
        existing = rb_hash_lookup2(headers, server_timing_key_capitalized, Qundef);
        if (existing != Qundef) key = server_timing_key_capitalized;
    }
    VALUE value = timing_server_timing(self);
    if (existing != Qundef && existing != Qnil) {
        if (!RB_TYPE_P(existing, T_STRING)) return Qnil;
        if (RSTRING_LEN(existing) > 0) value = rb_str_plus(rb_str_plus(existing, rb_str_new_cstr(", ")), value);
    }
    rb_hash_aset(headers, key, value);
    timing_of(self)->header_added = 1;
    return response;
}

// For breakdown.c's RackRequests#finish: finishes the timing and copies its numbers to out (as
// gvls_request_timing_values; raises TypeError if timing is not a RequestTiming).
void gvls_request_timing_finish_values(VALUE self, uint64_t out[GVLS_REQUEST_VALUES]) {
    request_timing *timing = timing_of(self);
    finish(timing);
    put_values(timing, timing->delta, timing->duration_ns, timing->loop_wait_ns, out);
}

// Then, as finish_response does on the finished timing.
VALUE gvls_request_timing_respond(VALUE timing, VALUE response, VALUE add_header) {
    return RTEST(add_header) ? add_server_timing(timing, response) : response;
}

void gvls_request_timing_init(VALUE mGVLScope) {
    gvls_threads_listen(&slot_listener);
    VALUE cTiming = cRequestTiming = rb_define_class_under(mGVLScope, "RequestTiming", rb_cObject);
    rb_define_alloc_func(cTiming, timing_alloc);
    rb_define_method(cTiming, "initialize", timing_initialize, -1);
    rb_define_singleton_method(cTiming, "start", timing_start, -1);
    rb_define_method(cTiming, "finish!", timing_finish, 0);
    rb_define_method(cTiming, "finished?", timing_finished_p, 0);
    rb_define_method(cTiming, "thread", timing_thread, 0);
#define DEFINE_READER(name, value, reader) DEFINE_READER_##reader(name)
#define DEFINE_READER_READER(name) rb_define_method(cTiming, #name, timing_##name, 0);
#define DEFINE_READER_OWN_READER(name)
    GVLS_REQUEST_FIELDS(DEFINE_READER)
    rb_define_method(cTiming, "queue_ns", timing_queue_ns, 0);
    rb_define_method(cTiming, "loop_wait_known?", timing_loop_wait_known_p, 0);
    rb_define_method(cTiming, "enqueued_at=", timing_set_enqueued_at, 1);
    rb_define_method(cTiming, "queue_latency_ns", timing_queue_latency_ns, 0);
    rb_define_method(cTiming, "pickup_exact?", timing_pickup_exact_p, 0);
    rb_define_method(cTiming, "queue_thread_ns", timing_queue_thread_ns, 0);
    rb_define_method(cTiming, "queue_cpu_ns", timing_queue_cpu_ns, 0);
    rb_define_method(cTiming, "blocked_before_start_ns", timing_blocked_before_start_ns, 0);
    rb_define_method(cTiming, "server_timing", timing_server_timing, 0);
    rb_define_method(cTiming, "finish_response", timing_finish_response, 2);
    server_timing_key = rb_obj_freeze(rb_usascii_str_new_cstr("server-timing"));
    rb_gc_register_mark_object(server_timing_key);
    server_timing_key_capitalized = rb_obj_freeze(rb_usascii_str_new_cstr("Server-Timing"));
    rb_gc_register_mark_object(server_timing_key_capitalized);
}

// ---- Jobs on an event loop's task --------------------------------------------------------------
// RequestTiming.start_on_loop(io): work that came over a socket and runs on an event loop's task (a
// job runner on async, each worker task popping its jobs from Redis over its own TCP connection)
// starts now, and it waited for its loop from its bytes' arrival on io until its task's turn began,
// as a Falcon request from its connection's (loop_wait_of). io: an IO or what converts to one
// (to_io: an SSL socket's TCP socket, whose bytes are the work's too). Loop tracking starts at the
// first such start on a task, whose turn is unknown (EventLoops.track starts it earlier); off a
// task, or on a closed IO, it is RequestTiming.start.
static VALUE timing_start_on_loop(VALUE klass, VALUE io) {
    VALUE file = rb_check_convert_type(io, T_FILE, "IO", "to_io");
    if (NIL_P(file)) {
        rb_raise(rb_eTypeError, "GVLScope::RequestTiming.start_on_loop: expected the IO the work came on, got %"PRIsVALUE,
                 rb_obj_class(io));
    }
    gvls_fibers_requests = 1;  // as EventLoops.track: gvls_fibers_on_task looks for the loop (and turns tracking on)
    int on_task = gvls_fibers_on_task();
    int fd = on_task && !RTEST(rb_funcall(file, rb_intern("closed?"), 0)) ? rb_io_descriptor(file) : -1;
    return start_current(klass, -1, fd, Qnil);
}

void gvls_request_timing_loop_init(void) {
    rb_define_singleton_method(cRequestTiming, "start_on_loop", timing_start_on_loop, 1);
}
