// The timeline's state machine, event by event (test/support/reference_timeline.rb, the test oracle, rule for rule:
// keep the two in step): transitions close intervals, which go to the consumers that read them
// at close (on_close: blame, samples, overview) and, once no later event can change them (a run's
// release cause), to those that read each thread's final intervals (settle -> on_final).
#include <string.h>

#include "pass_shared.h"

static eng_interval *run_interval(eng_thread *thread) {
    if (thread->run_ref >= 0) return &thread->pending[thread->run_ref];
    if (thread->run_ref == RUN_REF_GHOST) return &thread->ghost;
    return NULL;
}

// Hands the intervals before the thread's last run (which may still change) to on_final.
void settle(eng_engine *engine, uint32_t at) {
    eng_thread *thread = THREAD(engine, at);
    uint32_t keep_from = thread->run_ref >= 0 ? (uint32_t)thread->run_ref : thread->pending_size;
    for (uint32_t i = 0; i < keep_from; i++) {
        eng_interval interval = THREAD(engine, at)->pending[i];
        on_final(engine, at, &interval);
    }
    thread = THREAD(engine, at);
    if (keep_from == 0) return;
    memmove(thread->pending, thread->pending + keep_from, (thread->pending_size - keep_from) * sizeof(eng_interval));
    thread->pending_size -= keep_from;
    if (thread->run_ref >= 0) thread->run_ref -= (int32_t)keep_from;
}

static int32_t pending_push(eng_engine *engine, eng_thread *thread, const eng_interval *interval) {
    if (thread->pending_size == thread->pending_capacity) {
        uint32_t capacity = thread->pending_capacity ? thread->pending_capacity * 2 : 4;
        thread->pending = eng_realloc(&engine->memory, thread->pending, thread->pending_capacity * sizeof(eng_interval),
                                      capacity * sizeof(eng_interval));
        thread->pending_capacity = capacity;
    }
    thread->pending[thread->pending_size] = *interval;
    return (int32_t)thread->pending_size++;
}

// What sees an interval as it closes, in time order across threads.
static void on_close(eng_engine *engine, uint32_t at, const eng_interval *interval) {
    eng_thread *thread = THREAD(engine, at);
    uint8_t previous = thread->last_listed_state;
    thread->last_listed_state = interval->state;
    if (engine->windows_only) return;
    if (interval->state == ST_WAIT) {
        if (engine->blame) blame_wait(engine, at, interval->start, interval->end, previous == ST_IDLE);
        if (engine->code) samples_during(engine, at, interval->start, interval->end);
    } else if ((interval->state == ST_RUN || interval->state == ST_GC) && engine->blame) {
        blame_hold(engine, at, interval);
    }
    thread = THREAD(engine, at);
    if (engine->bins) overview_add(engine, thread, interval);
    if (interval->state == ST_RUN && interval->has_native) {
        uint32_t owner = map_get(&engine->native_owner, interval->native);
        if (owner == UINT32_MAX) map_put(&engine->memory, &engine->native_owner, interval->native, thread->serial);
        else if (owner != thread->serial) engine->shared_natives = true;
    }
}

// Timeline#close: ends the thread's state at +time+ as an interval.
void close_interval(eng_engine *engine, uint32_t at, int64_t time) {
    eng_thread *thread = THREAD(engine, at);
    eng_interval interval = { 0 };
    interval.thread = at;
    if (thread->state == ST_EXITED) {
        interval.state = ST_EXITED;
        interval.start = interval.end = thread->since;
        interval.listed = 1;
        on_close(engine, at, &interval);
        thread = THREAD(engine, at);
        pending_push(engine, thread, &interval);
        set_state(engine, at, ST_GONE);
        settle(engine, at);
        return;
    }
    if (thread->state == ST_NONE || thread->state == ST_GONE) return;
    uint8_t reason = thread->reason;
    if (thread->state == ST_IDLE && !reason) reason = thread->site_cause ? thread->site_cause : R_UNKNOWN;
    interval.state = thread->state;
    interval.start = thread->since;
    interval.end = time;
    interval.reason = reason;
    if (thread->state == ST_RUN && thread->has_native) {
        interval.has_native = 1;
        interval.native = thread->native;
    }
    interval.listed = time > thread->since || thread->state == ST_STARTED;
    int32_t ref = RUN_REF_GHOST;
    if (interval.listed) {
        on_close(engine, at, &interval);
        thread = THREAD(engine, at);
        ref = pending_push(engine, thread, &interval);
    }
    if (thread->state == ST_RUN) {
        thread->run_ref = ref;
        if (ref == RUN_REF_GHOST) thread->ghost = interval;
    } else if (thread->state == ST_IDLE || thread->state == ST_WAIT) {
        thread->run_ref = RUN_REF_NONE;
    }
    settle(engine, at);
}

static void counter_update(eng_engine *engine, int64_t time) {
    if (engine->counter_open && engine->counter_time == time) {
        engine->counter_value = engine->waiting_total;
        return;
    }
    if (engine->counter_open && engine->counter_value == engine->waiting_total) return;
    if (engine->counter_open && engine->spill) eng_counter_add(engine, engine->counter_time, engine->counter_value);
    if (engine->counter_open) engine->counter_entries++;
    engine->counter_open = true;
    engine->counter_time = time;
    engine->counter_value = engine->waiting_total;
}

// Timeline#transition.
static void transition(eng_engine *engine, uint32_t at, uint8_t state, int64_t time) {
    eng_thread *thread = THREAD(engine, at);
    if (thread->state == ST_WAIT) add_waiting(engine, thread->ractor, -1);
    if (state == ST_WAIT) add_waiting(engine, thread->ractor, 1);
    close_interval(engine, at, time);
    set_state(engine, at, state);
    thread = THREAD(engine, at);
    thread->since = time;
    thread->reason = R_NONE;
    counter_update(engine, time);
}

// Timeline#release: what ended the run, told at SUSPENDED. Without a site the cause is unknown
// (the recorder takes one only while another thread waits): no guess at "blocking".
static void release(eng_engine *engine, uint32_t at, uint32_t stack) {
    eng_thread *thread = THREAD(engine, at);
    bool site = stack != 0 && stack < engine->stack_limit && engine->stack_causes[stack] != 0;
    uint8_t cause = site ? engine->stack_causes[stack] : R_UNKNOWN;
    thread->site_cause = site ? cause : R_NONE;
    eng_interval *run = run_interval(thread);
    if (!run) return;
    if (!run->site) run->site = site ? stack : 0;
    if (!run->reason) run->reason = cause;
}

const uint8_t INFERRED_BEFORE[] = {
    [EV_READY] = ST_IDLE, [EV_RESUMED] = ST_WAIT, [EV_SUSPENDED] = ST_RUN, [EV_EXITED] = ST_RUN,
    [EV_GC_ENTER] = ST_RUN, [EV_GC_EXIT] = ST_GC,
};

void process_event(eng_engine *engine, const eng_item *item) {
    uint32_t at = item->serial < SMALL_SERIALS ? engine->small_serials[item->serial] : map_get(&engine->thread_of, item->serial);
    eng_thread *thread = THREAD(engine, at);
    int64_t time = item->time;
    if (thread->cursor_order < 0) {
        thread->cursor_order = (int32_t)engine->cursor_order.size;
        *(uint32_t *)vec_push(&engine->memory, &engine->cursor_order) = at;
        register_thread(engine, at);
        thread = THREAD(engine, at);
        // A thread that existed before the trace was in its inferred state from the start; the
        // Ruby scan counts it as waiting only from its first event.
        if (item->kind != EV_STARTED && thread->state == ST_WAIT) add_waiting(engine, thread->ractor, 1);
    }
    eng_ractor *ractor = RACTOR(engine, thread->ractor);
    switch (item->kind) {
    case EV_STARTED:
        transition(engine, at, ST_STARTED, time);
        break;
    case EV_READY:
        if (thread->state == ST_IDLE && thread->reason == R_NONE) {
            bool same_native = thread->has_suspend_native && item->native == thread->suspend_native;
            int64_t since_resume = thread->has_resumed_at ? thread->suspend_time - thread->resumed_at : 0;
            if (same_native && thread->others_wanted && ractor->resumes == thread->resumes_at_suspend &&
                since_resume >= engine->timeslice_ns / 2) {
                // SUSPENDED then READY on the same native thread before anyone else got the GVL: the
                // thread gave the GVL up but stayed runnable. Rewrite the release.
                set_state(engine, at, ST_WAIT);
                add_waiting(engine, thread->ractor, 1);
                eng_interval *run = run_interval(THREAD(engine, at));
                if (run) run->reason = R_PREEMPTED;
                break;
            }
            thread->reason = thread->site_cause ? thread->site_cause : (same_native ? R_IO_SLEEP : R_LOCK);
        }
        if (thread->state != ST_WAIT) transition(engine, at, ST_WAIT, time);
        break;
    case EV_RESUMED: {
        ractor->resumes++;
        int64_t still_waiting = ractor->waiting - (thread->state == ST_WAIT ? 1 : 0);
        engine->waiters_at_acquire[bit_length(still_waiting < 0 ? 0 : still_waiting)]++;
        transition(engine, at, ST_RUN, time);
        thread = THREAD(engine, at);
        thread->resumed_at = time;
        thread->has_resumed_at = 1;
        thread->native = item->native;
        thread->has_native = 1;
        thread->site_cause = R_NONE;
        break;
    }
    case EV_SUSPENDED: {
        int64_t others = ractor->waiting - (thread->state == ST_WAIT ? 1 : 0);
        transition(engine, at, ST_IDLE, time);
        release(engine, at, item->aux);
        thread = THREAD(engine, at);
        thread->suspend_native = item->native;
        thread->has_suspend_native = 1;
        thread->suspend_time = time;
        thread->others_wanted = others > 0;
        thread->resumes_at_suspend = RACTOR(engine, thread->ractor)->resumes;
        break;
    }
    case EV_EXITED: {
        if (thread->state == ST_IDLE && thread->reason == R_NONE) {
            // SUSPENDED then EXITED: the last release was the exit itself, not a wait.
            eng_interval *run = run_interval(thread);
            if (run) run->reason = R_EXIT;
            set_state(engine, at, ST_EXITED);
            THREAD(engine, at)->since = time;
            break;
        }
        bool was_running = thread->state == ST_RUN;
        transition(engine, at, ST_EXITED, time);
        eng_interval *run = run_interval(THREAD(engine, at));
        if (was_running && run) run->reason = R_EXIT;
        break;
    }
    case EV_GC_ENTER:
        if (thread->state == ST_RUN || thread->state == ST_NONE) transition(engine, at, ST_GC, time);
        break;
    case EV_GC_EXIT:
        if (thread->state == ST_GC) transition(engine, at, ST_RUN, time);
        break;
    }
}

// Timeline#add_samples: the holder's stack, kept when threads of its Ractor waited then; one no
// thread waited for (an event loop's long turn: fibers.c samples it) apart, in lone_samples.
void process_sample(eng_engine *engine, const eng_item *item) {
    uint32_t at = thread_index(engine, item->serial);
    register_thread(engine, at);
    eng_thread *thread = THREAD(engine, at);
    int64_t waiters = RACTOR(engine, thread->ractor)->waiting;
    uint32_t stack = item->aux;
    bool known = stack != 0 && stack < engine->stack_limit && engine->stack_causes[stack] != 0;
    if (!known) return;
    if (waiters <= 0) {
        eng_sample *lone = vec_push(&engine->memory, &engine->lone_samples);
        *lone = (eng_sample){ .time = item->time, .thread = at, .stack = stack, .waiters = 0 };
        return;
    }
    eng_sample *sample = vec_push(&engine->memory, &engine->samples);
    sample->time = item->time;
    sample->thread = at;
    sample->stack = stack;
    sample->waiters = waiters;
    if (!engine->code) return;
    eng_pair *entry = pair(engine, &engine->holder_stacks, &engine->holder_stack_of, (uint64_t)at << 32 | stack, at, stack);
    if (!entry->has_all) {
        entry->has_all = 1;
        entry->all_seq = engine->sequence++;
    }
    entry->all_ns += waiters;
    entry->count++;
    entry = pair(engine, &engine->stacks_sampled, &engine->stack_sampled_of, stack, 0, stack);
    if (!entry->has_all) {
        entry->has_all = 1;
        entry->all_seq = engine->sequence++;
    }
    entry->all_ns += waiters;
    entry->count++;
}
