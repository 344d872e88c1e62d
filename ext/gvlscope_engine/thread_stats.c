// What reads each thread's final intervals, in the thread's order (on_final): the row of
// ThreadStats (totals, holds and waits, releases by cause, longest intervals, blocking waits,
// medians), hold streaks, IO overlap, the hold and wait histograms and release sites; then the
// exports' names and spill, and the detail windows (windows.c).
#include "pass_shared.h"

void commit_release(eng_engine *engine, uint32_t at, eng_thread *thread) {
    uint64_t key = (uint64_t)at << 36 | (uint64_t)thread->release_site << 4 | thread->release_reason;
    eng_pair *entry = pair(engine, &engine->sites, &engine->site_of, key, at, thread->release_site);
    entry->reason = thread->release_reason;
    entry->all_ns += thread->release_waited;
    entry->count++;
    thread->release_open = 0;
}

// Ends the thread's hold streak: a long one (a timeslice or more running on a CPU: held, less
// what the OS measurably kept it off a CPU) ended by a pause counts.
void streak_close(eng_engine *engine, eng_thread *thread, bool paused) {
    if (!thread->streak_open) return;
    thread->streak_open = 0;
    int64_t running = thread->streak_held - thread->streak_off;
    if (!paused || running < engine->timeslice_ns) return;
    thread->long_streaks++;
    thread->long_streak_held += thread->streak_held;
    thread->long_streak_off += thread->streak_off;
    if (running > thread->longest_streak_held - thread->longest_streak_off) {
        thread->has_longest_streak = 1;
        thread->longest_streak[0] = thread->streak_start;
        thread->longest_streak[1] = thread->streak_end;
        thread->longest_streak_held = thread->streak_held;
        thread->longest_streak_off = thread->streak_off;
    }
}

// A hold streak goes on across waits and idles shorter than a quarter timeslice (thread_stats.rb's Streaks).
static void streak_add(eng_engine *engine, eng_thread *thread, const eng_interval *interval, int64_t off) {
    uint8_t state = interval->state;
    if (state == ST_RUN || state == ST_GC) {
        if (!thread->streak_open) {
            thread->streak_open = 1;
            thread->streak_start = interval->start;
            thread->streak_held = 0;
            thread->streak_off = 0;
        }
        thread->streak_held += interval->end - interval->start;
        thread->streak_off += off;
        thread->streak_end = interval->end;
    } else if (state == ST_IDLE && interval->end - interval->start >= engine->slow_wait_ns) {
        streak_close(engine, thread, true);
    } else if (state == ST_EXITED || state == ST_STARTED) {
        streak_close(engine, thread, false);
    }
}

// The hook's bounds (analysis/io_overlap.rb): a release shorter than this returned at once; a
// hold this long or more is other work.
#define QUICK_RELEASE_NS 1000000
#define OVERLAP_HOLD_NS 1000000

// The GVL wait that IO the thread had started overlapped (analysis/io_overlap.rb, rule for rule).
static void io_overlap_add(eng_thread *thread, uint8_t state, int64_t duration) {
    if (state == ST_RUN || state == ST_GC) {
        thread->overlap_hold += duration;
    } else if (state == ST_IDLE) {
        if (thread->overlap_hold >= OVERLAP_HOLD_NS) thread->overlap_pending = 0;
        thread->overlap_hold = 0;
        thread->overlap_woke_at_once = duration < QUICK_RELEASE_NS;
        if (!thread->overlap_woke_at_once) {
            thread->overlap_counted += thread->overlap_pending;
            thread->overlap_pending = 0;
        }
    } else if (state == ST_WAIT) {
        if (thread->previous_state == ST_IDLE) {
            if (thread->overlap_woke_at_once) thread->overlap_pending += duration;
        } else {
            if (thread->overlap_hold >= OVERLAP_HOLD_NS) thread->overlap_pending = 0;
            thread->overlap_woke_at_once = 0;
        }
        thread->overlap_hold = 0;
    }
}

void on_final(eng_engine *engine, uint32_t at, const eng_interval *interval) {
    eng_thread *thread = THREAD(engine, at);
    int64_t duration = interval->end - interval->start;
    uint8_t state = interval->state;
    uint64_t listed = thread->listed++;
    if (engine->windows_only) goto windows;
    if (!engine->stats) goto exports;
    thread->totals[state] += duration;
    int64_t off = state == ST_RUN || state == ST_GC ? cpu_time_off(engine, interval) : 0;
    thread->held_off += off;
    streak_add(engine, thread, interval, off);
    io_overlap_add(thread, state, duration); // before previous_state moves on
    if (state == ST_IDLE && duration > 0) thread->idle_by_reason[interval->reason] += duration;
    if (state == ST_RUN) {
        if (thread->previous_state != ST_GC) thread->holds++; // a GC inside a hold splits it, it is still one hold
        if (interval->reason) {
            if (thread->released[interval->reason]++ == 0) thread->release_order[thread->release_kinds++] = interval->reason;
        }
        if (!thread->has_longest_run || duration > thread->longest_run[1] - thread->longest_run[0]) {
            thread->has_longest_run = 1;
            thread->longest_run[0] = interval->start;
            thread->longest_run[1] = interval->end;
        }
    } else if (state == ST_GC) {
        if (!thread->has_longest_gc || duration > thread->longest_gc[1] - thread->longest_gc[0]) {
            thread->has_longest_gc = 1;
            thread->longest_gc[0] = interval->start;
            thread->longest_gc[1] = interval->end;
        }
    } else if (state == ST_WAIT) {
        thread->waits++;
        median_push(engine, &thread->wait_median, duration);
        median_push(engine, &engine->all_waits, duration);
        if (!thread->has_longest_wait || duration > thread->longest_wait[1] - thread->longest_wait[0]) {
            thread->has_longest_wait = 1;
            thread->longest_wait[0] = interval->start;
            thread->longest_wait[1] = interval->end;
        }
        if (thread->previous_state == ST_IDLE) {
            thread->blocking_waits++;
            thread->blocking_wait_ns += duration;
            if (duration >= engine->slow_wait_ns) {
                thread->slow_blocking_waits++;
                median_push(engine, &thread->slow_median, duration);
                if (!thread->has_longest_slow || duration > thread->longest_slow[1] - thread->longest_slow[0]) {
                    thread->has_longest_slow = 1;
                    thread->longest_slow[0] = interval->start;
                    thread->longest_slow[1] = interval->end;
                }
            }
        }
    }
    thread->previous_state = state;
    // Histograms: a hold is run (gc run)* up to whatever comes next.
    if (state == ST_RUN || state == ST_GC) {
        thread->hold_ns += duration;
        thread->hold_open = 1;
    } else {
        if (state == ST_WAIT) thread->wait_histogram[bit_length(duration)]++;
        if (thread->hold_open) {
            thread->hold_histogram[bit_length(thread->hold_ns)]++;
            thread->hold_open = 0;
            thread->hold_ns = 0;
        }
    }
    // Release sites: the wait that followed a release at a site, up to the next run or the exit.
    if ((state == ST_RUN || state == ST_EXITED) && thread->release_open) commit_release(engine, at, thread);
    if (state == ST_WAIT && thread->release_open) thread->release_waited += duration;
    if (state == ST_RUN && interval->site) {
        thread->release_open = 1;
        thread->release_site = interval->site;
        thread->release_reason = interval->reason;
        thread->release_waited = 0;
    }
exports:
    if (interval->end != interval->start) {
        if (interval->end > interval->start) thread->drawn = 1;
        uint8_t name = state == ST_IDLE ? (uint8_t)(ST_COUNT + interval->reason) : state;
        bool seen = false;
        for (uint8_t i = 0; i < thread->name_count; i++) seen |= thread->names[i] == name;
        if (!seen && thread->name_count < sizeof(thread->names)) thread->names[thread->name_count++] = name;
    }
    if (engine->spill) eng_stream_add(engine, &thread->stream, interval);
windows:
    for (size_t i = 0; i < engine->window_count; i++) {
        eng_window *window = &engine->windows[i];
        if ((interval->end > window->start || interval->start >= window->start) && interval->start < window->end) {
            eng_found found = { *interval, thread->order, listed };
            window_offer(engine, window, &found);
        }
    }
}
