// Blame, as waits close in time order across threads (Analysis::Blame): each wait split among
// the holds of the other threads of its Ractor that overlap it, the rest to the hand-off; the
// closed holds kept for that, pruned and folded so a long wait does not keep one entry per hold;
// and the holders' samples taken during each wait (CodeLocations#holders_while_waiting).
#include <stdlib.h>
#include <string.h>

#include "pass_shared.h"

static void blame_add(eng_engine *engine, uint32_t waiter, uint32_t holder_plus_one, int64_t ns, bool after_blocking) {
    uint64_t key = (uint64_t)waiter << 32 | holder_plus_one;
    eng_pair *entry = pair(engine, &engine->pairs, &engine->pair_of, key, waiter, holder_plus_one);
    if (!entry->has_all) {
        entry->has_all = 1;
        entry->all_seq = engine->sequence++;
    }
    entry->all_ns += ns;
    if (!after_blocking) return;
    if (!entry->has_after_blocking) {
        entry->has_after_blocking = 1;
        entry->after_blocking_seq = engine->sequence++;
    }
    entry->after_blocking_ns += ns;
}

static void blame_gc(eng_thread *waiter, int64_t start, int64_t ns) {
    if (!waiter->has_first_gc) {
        waiter->has_first_gc = 1;
        waiter->first_gc = start;
    }
    waiter->during_gc += ns;
}

// The wait [start, end) of thread +at+ split among the holds of other threads of its Ractor that
// overlap it, the rest to the hand-off (Analysis::Blame: the same sums of overlaps).
void blame_wait(eng_engine *engine, uint32_t at, int64_t start, int64_t end, bool after_blocking) {
    eng_thread *waiter = THREAD(engine, at);
    if (!waiter->has_first_wait) {
        waiter->has_first_wait = 1;
        waiter->first_wait = start;
    }
    if (after_blocking && !waiter->has_first_after_blocking) {
        waiter->has_first_after_blocking = 1;
        waiter->first_after_blocking = start;
    }
    eng_ractor *ractor = RACTOR(engine, waiter->ractor);
    int64_t held = 0;
    // Closed holds are in order of their end: the first that ends after the wait starts.
    size_t low = ractor->holds_head, high = ractor->holds.size;
    if (!engine->finished) {
        while (low < high) {
            size_t middle = low + (high - low) / 2;
            if (VEC_AT(ractor->holds, eng_hold, middle).end > start) high = middle;
            else low = middle + 1;
        }
    } else {
        low = ractor->holds_head; // the trace's end closes holds out of order: look at all
    }
    for (size_t i = low; i < ractor->holds.size; i++) {
        eng_hold *hold = &VEC_AT(ractor->holds, eng_hold, i);
        if (hold->sum_count) {
            // A folded run: the wait began at or before its first hold (it overlaps all of it) or
            // after its last (none of it); it ends after the run, closed before the wait did.
            if (start >= hold->end) continue;
            for (uint32_t j = 0; j < hold->sum_count; j++) {
                eng_hold_sum sum = VEC_AT(ractor->hold_sums, eng_hold_sum, hold->sum_at + j);
                if (sum.holder == at || sum.ns <= 0) continue;
                blame_add(engine, at, sum.holder + 1, sum.ns, after_blocking);
                if (sum.gc_ns > 0) blame_gc(THREAD(engine, at), start, sum.gc_ns);
                held += sum.ns;
            }
            continue;
        }
        if (hold->thread == at) continue;
        int64_t overlap = (hold->end < end ? hold->end : end) - (hold->start > start ? hold->start : start);
        if (overlap <= 0) continue;
        blame_add(engine, at, hold->thread + 1, overlap, after_blocking);
        if (hold->gc) blame_gc(THREAD(engine, at), start, overlap);
        held += overlap;
    }
    for (size_t i = 0; i < ractor->holders.size; i++) {
        uint32_t holder = VEC_AT(ractor->holders, uint32_t, i);
        if (holder == at) continue;
        eng_thread *holding = THREAD(engine, holder);
        int64_t overlap = end - (holding->since > start ? holding->since : start);
        if (overlap <= 0) continue;
        blame_add(engine, at, holder + 1, overlap, after_blocking);
        if (holding->state == ST_GC) blame_gc(THREAD(engine, at), start, overlap);
        held += overlap;
    }
    int64_t gap = end - start - held;
    if (gap > 0) blame_add(engine, at, 0, gap, after_blocking);
}

// Closed holds kept one by one before they are folded (a 24-byte entry each: 96 KB per Ractor).
#ifndef FOLD_HOLDS_AT
#define FOLD_HOLDS_AT 4096
#endif

// Whether thread +thread+ of +ractor+ is waiting, or may yet turn out to have been waiting since
// its release (an idle thread the preemption rule may rewrite): the only waits that can still
// overlap closed holds (any other starts from now on).
static bool may_be_waiting(const eng_ractor *ractor, const eng_thread *thread) {
    return thread->state == ST_WAIT ||
           (thread->state == ST_IDLE && thread->reason == R_NONE && thread->resumes_at_suspend == ractor->resumes);
}

static int compare_times(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

// Whether one of the sorted +starts+ (of the waits that can still overlap closed holds) is
// strictly inside (start, end).
static bool wait_starts_inside(const eng_vec *starts, int64_t start, int64_t end) {
    size_t low = 0, high = starts->size;
    while (low < high) { // the first start after +start+
        size_t middle = low + (high - low) / 2;
        if (VEC_AT(*starts, int64_t, middle) > start) high = middle;
        else low = middle + 1;
    }
    return low < starts->size && VEC_AT(*starts, int64_t, low) < end;
}

static void sum_into(eng_engine *engine, eng_vec *sums, size_t run_at, uint32_t holder, int64_t ns, int64_t gc_ns) {
    for (size_t i = run_at; i < sums->size; i++) {
        eng_hold_sum *sum = &VEC_AT(*sums, eng_hold_sum, i);
        if (sum->holder != holder) continue;
        sum->ns += ns;
        sum->gc_ns += gc_ns;
        return;
    }
    eng_hold_sum *added = vec_push(&engine->memory, sums);
    added->holder = holder;
    added->ns = ns;
    added->gc_ns = gc_ns;
}

// Folds runs of closed holds into per-holder sums, so that a thread waiting across millions of
// holds keeps a few entries per holder instead of one per hold: a run joins holds (and runs)
// while no wait that can still overlap them starts strictly inside their span. Such a wait began
// at or before the run (it overlaps every hold whole: the holds closed before it will) or after it
// (none); waits that start later overlap none. A hold some wait began inside stays as it is.
static void fold_holds(eng_engine *engine, eng_ractor *ractor) {
    eng_vec starts;
    vec_init(&starts, sizeof(int64_t));
    for (size_t i = 0; i < ractor->members.size; i++) {
        const eng_thread *thread = THREAD(engine, VEC_AT(ractor->members, uint32_t, i));
        if (may_be_waiting(ractor, thread)) *(int64_t *)vec_push(&engine->memory, &starts) = thread->since;
    }
    if (starts.size > 1) qsort(starts.data, starts.size, sizeof(int64_t), compare_times);
    eng_vec sums;
    vec_init(&sums, sizeof(eng_hold_sum));
    size_t kept = 0;
    bool run_open = false;
    for (size_t i = ractor->holds_head; i < ractor->holds.size; i++) {
        eng_hold item = VEC_AT(ractor->holds, eng_hold, i);
        bool folded = item.sum_count > 0;
        if (!folded && item.end <= item.start) continue; // overlaps no wait
        if (!folded && wait_starts_inside(&starts, item.start, item.end)) {
            VEC_AT(ractor->holds, eng_hold, kept++) = item;
            run_open = false;
            continue;
        }
        eng_hold *run = run_open ? &VEC_AT(ractor->holds, eng_hold, kept - 1) : NULL;
        if (run) {
            int64_t start = item.start < run->start ? item.start : run->start;
            int64_t end = item.end > run->end ? item.end : run->end;
            if (wait_starts_inside(&starts, start, end)) run = NULL;
            else {
                run->start = start;
                run->end = end;
            }
        }
        if (!run) {
            run = &VEC_AT(ractor->holds, eng_hold, kept++);
            *run = (eng_hold){ .start = item.start, .end = item.end, .sum_at = (uint32_t)sums.size };
            run_open = true;
        }
        if (folded) {
            for (uint32_t j = 0; j < item.sum_count; j++) {
                eng_hold_sum sum = VEC_AT(ractor->hold_sums, eng_hold_sum, item.sum_at + j);
                sum_into(engine, &sums, run->sum_at, sum.holder, sum.ns, sum.gc_ns);
            }
        } else {
            int64_t ns = item.end - item.start;
            sum_into(engine, &sums, run->sum_at, item.thread, ns, item.gc ? ns : 0);
        }
        run->sum_count = (uint32_t)(sums.size - run->sum_at);
    }
    ractor->holds.size = kept;
    ractor->holds_head = 0;
    vec_free(&engine->memory, &ractor->hold_sums);
    ractor->hold_sums = sums;
    vec_free(&engine->memory, &starts);
}

// Drops the closed holds no wait can overlap any more: those that ended before every wait still
// open began, before every thread that may yet turn out to have been waiting, and before now.
// Then, if many remain (a thread waiting across many holds), folds them.
static void prune_holds(eng_engine *engine, eng_ractor *ractor) {
    int64_t horizon = engine->now;
    for (size_t i = 0; i < ractor->members.size; i++) {
        eng_thread *thread = THREAD(engine, VEC_AT(ractor->members, uint32_t, i));
        if (may_be_waiting(ractor, thread) && thread->since < horizon) horizon = thread->since;
    }
    while (ractor->holds_head < ractor->holds.size && VEC_AT(ractor->holds, eng_hold, ractor->holds_head).end <= horizon) {
        ractor->holds_head++;
    }
    size_t live = ractor->holds.size - ractor->holds_head;
    if (ractor->holds_head > live) {
        memmove(ractor->holds.data, ractor->holds.data + ractor->holds_head * sizeof(eng_hold), live * sizeof(eng_hold));
        ractor->holds.size = live;
        ractor->holds_head = 0;
    }
    if (live > FOLD_HOLDS_AT) {
        fold_holds(engine, ractor);
        live = ractor->holds.size;
    }
    ractor->prune_at = live * 2 > FOLD_HOLDS_AT ? live * 2 : FOLD_HOLDS_AT;
}

void blame_hold(eng_engine *engine, uint32_t at, const eng_interval *interval) {
    eng_ractor *ractor = RACTOR(engine, THREAD(engine, at)->ractor);
    eng_hold *hold = vec_push(&engine->memory, &ractor->holds);
    hold->start = interval->start;
    hold->end = interval->end;
    hold->thread = at;
    hold->gc = interval->state == ST_GC;
    if (ractor->holds.size - ractor->holds_head > ractor->prune_at) prune_holds(engine, ractor);
}

// The holders' samples taken during a wait (CodeLocations#holders_while_waiting).
void samples_during(eng_engine *engine, uint32_t at, int64_t start, int64_t end) {
    eng_vec *samples = &engine->samples;
    size_t low = 0, high = samples->size;
    while (low < high) {
        size_t middle = low + (high - low) / 2;
        if (VEC_AT(*samples, eng_sample, middle).time >= start) high = middle;
        else low = middle + 1;
    }
    for (size_t i = low; i < samples->size; i++) {
        eng_sample *sample = &VEC_AT(*samples, eng_sample, i);
        if (sample->time >= end) break;
        if (sample->thread == at) continue;
        eng_pair *entry = pair(engine, &engine->waiter_stacks, &engine->waiter_stack_of,
                               (uint64_t)at << 32 | sample->stack, at, sample->stack);
        if (!entry->has_all) {
            entry->has_all = 1;
            entry->all_seq = engine->sequence++;
        }
        entry->count++;
    }
}
