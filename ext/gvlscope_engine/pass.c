// One pass: the chunks merged in time order, the timeline's state machine replayed event by event
// (test/support/reference_timeline.rb, rule for rule: keep the two in step), and every consumer fed
// as intervals close. Nothing here keeps an interval once its consumers have seen it.
//
// Two streams of intervals leave the state machine:
// - at close, in time order across threads: the blame (who held the GVL during each wait),
//   the samples during each wait, the overview's bins;
// - once final, in each thread's order: a run interval's release cause can still change after
//   it closed (a READY that turns the release into a preemption, an EXITED), so each thread's
//   intervals wait from its last run on; then the rows, histograms, release sites, detail
//   windows and the exports' spill read them.
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pass.h"

// ---------------------------------------------------------------- medians

#define MEDIAN_OWN_CAP ((size_t)1 << 20) // values one median keeps exactly at most
#define MEDIAN_SMALL 1024               // a median this small stays exact whatever the budget

static unsigned median_bucket(int64_t value) {
    if (value < (1 << MEDIAN_SUB_BITS)) return value < 0 ? 0 : (unsigned)value;
    unsigned exponent = 63u - (unsigned)__builtin_clzll((uint64_t)value);
    unsigned sub = (unsigned)((uint64_t)value >> (exponent - MEDIAN_SUB_BITS)) - (1u << MEDIAN_SUB_BITS);
    return (1u << MEDIAN_SUB_BITS) + ((exponent - MEDIAN_SUB_BITS) << MEDIAN_SUB_BITS) + sub;
}

// The middle of a bucket.
static int64_t median_bucket_value(unsigned bucket) {
    if (bucket < (1u << MEDIAN_SUB_BITS)) return bucket;
    unsigned exponent = ((bucket - (1u << MEDIAN_SUB_BITS)) >> MEDIAN_SUB_BITS) + MEDIAN_SUB_BITS;
    uint64_t sub = (bucket - (1u << MEDIAN_SUB_BITS)) & ((1u << MEDIAN_SUB_BITS) - 1);
    uint64_t low = ((uint64_t)(1u << MEDIAN_SUB_BITS) + sub) << (exponent - MEDIAN_SUB_BITS);
    uint64_t width = (uint64_t)1 << (exponent - MEDIAN_SUB_BITS);
    uint64_t middle = low + width / 2;
    return middle > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)middle;
}

static void median_fold(eng_engine *engine, eng_median *median) {
    median->histogram = eng_alloc(&engine->memory, MEDIAN_BUCKETS * sizeof(uint64_t));
    for (size_t i = 0; i < median->size; i++) median->histogram[median_bucket(median->values[i])]++;
    eng_free(&engine->memory, median->values, median->capacity * sizeof(int64_t));
    engine->exact_values -= median->size;
    median->values = NULL;
    median->size = median->capacity = 0;
}

static void median_push(eng_engine *engine, eng_median *median, int64_t value) {
    median->count++;
    if (!median->histogram && median->size == median->capacity) {
        bool over = median->size >= MEDIAN_OWN_CAP ||
                    (engine->exact_values >= engine->median_budget && median->size >= MEDIAN_SMALL);
        if (over) {
            median_fold(engine, median);
        } else {
            size_t capacity = median->capacity ? median->capacity * 2 : 8;
            median->values = eng_realloc(&engine->memory, median->values, median->capacity * sizeof(int64_t),
                                         capacity * sizeof(int64_t));
            median->capacity = capacity;
        }
    }
    if (median->histogram) {
        median->histogram[median_bucket(value)]++;
        return;
    }
    median->values[median->size++] = value;
    engine->exact_values++;
}

// values.sort[size / 2]: quickselect, in place.
static int64_t select_nth(int64_t *values, size_t size, size_t nth) {
    size_t low = 0, high = size - 1;
    while (low < high) {
        int64_t pivot = values[low + (high - low) / 2];
        size_t i = low, j = high;
        while (i <= j) {
            while (values[i] < pivot) i++;
            while (values[j] > pivot) j--;
            if (i <= j) {
                int64_t swap = values[i];
                values[i] = values[j];
                values[j] = swap;
                i++;
                if (j == 0) break;
                j--;
            }
        }
        if (nth <= j) high = j;
        else if (nth >= i) low = i;
        else return values[nth];
    }
    return values[nth];
}

int64_t eng_median_value(const eng_median *median) {
    if (median->count == 0) return 0;
    if (!median->histogram) return select_nth(median->values, median->size, median->size / 2);
    uint64_t rank = median->count / 2, seen = 0;
    for (unsigned bucket = 0; bucket < MEDIAN_BUCKETS; bucket++) {
        seen += median->histogram[bucket];
        if (seen > rank) return median_bucket_value(bucket);
    }
    return 0;
}

void eng_median_free(eng_memory *memory, eng_median *median) {
    eng_free(memory, median->values, median->capacity * sizeof(int64_t));
    eng_free(memory, median->histogram, median->histogram ? MEDIAN_BUCKETS * sizeof(uint64_t) : 0);
    memset(median, 0, sizeof(*median));
}

// ---------------------------------------------------------------- threads, Ractors, pairs

static uint32_t ractor_index(eng_engine *engine, uint32_t id) {
    uint32_t at = map_get(&engine->ractor_of, id);
    if (at != UINT32_MAX) return at;
    at = (uint32_t)engine->ractors.size;
    eng_ractor *ractor = vec_push(&engine->memory, &engine->ractors);
    ractor->id = id;
    ractor->prune_at = 4096;
    vec_init(&ractor->holds, sizeof(eng_hold));
    vec_init(&ractor->hold_sums, sizeof(eng_hold_sum));
    vec_init(&ractor->holders, sizeof(uint32_t));
    vec_init(&ractor->members, sizeof(uint32_t));
    map_put(&engine->memory, &engine->ractor_of, id, at);
    return at;
}

static uint32_t thread_index(eng_engine *engine, uint32_t serial) {
    uint32_t at = map_get(&engine->thread_of, serial);
    if (at != UINT32_MAX) return at;
    uint32_t ractor_id = map_get(&engine->ractor_id_of, serial);
    uint32_t ractor = ractor_index(engine, ractor_id == UINT32_MAX ? 0 : ractor_id);
    at = (uint32_t)engine->threads.size;
    eng_thread *thread = vec_push(&engine->memory, &engine->threads);
    thread->serial = serial;
    thread->ractor = ractor;
    thread->order = -1;
    thread->cursor_order = -1;
    thread->run_ref = RUN_REF_NONE;
    map_put(&engine->memory, &engine->thread_of, serial, at);
    if (serial < SMALL_SERIALS) engine->small_serials[serial] = at;
    *(uint32_t *)vec_push(&engine->memory, &RACTOR(engine, ractor)->members) = at;
    return at;
}

static void register_thread(eng_engine *engine, uint32_t at) {
    eng_thread *thread = THREAD(engine, at);
    if (thread->order >= 0) return;
    thread->order = (int32_t)engine->order.size;
    *(uint32_t *)vec_push(&engine->memory, &engine->order) = at;
}

static eng_pair *pair(eng_engine *engine, eng_vec *pairs, eng_map *map, uint64_t key, uint32_t a, uint32_t b) {
    uint32_t at = map_get(map, key);
    if (at == UINT32_MAX) {
        at = (uint32_t)pairs->size;
        eng_pair *created = vec_push(&engine->memory, pairs);
        created->a = a;
        created->b = b;
        map_put(&engine->memory, map, key, at);
    }
    return &VEC_AT(*pairs, eng_pair, at);
}

static void set_state(eng_engine *engine, uint32_t at, uint8_t state) {
    eng_thread *thread = THREAD(engine, at);
    bool was_holding = thread->state == ST_RUN || thread->state == ST_GC;
    bool holding = state == ST_RUN || state == ST_GC;
    thread->state = state;
    if (was_holding == holding) return;
    eng_vec *holders = &RACTOR(engine, thread->ractor)->holders;
    if (holding) {
        *(uint32_t *)vec_push(&engine->memory, holders) = at;
        return;
    }
    for (size_t i = 0; i < holders->size; i++) {
        if (VEC_AT(*holders, uint32_t, i) == at) {
            VEC_AT(*holders, uint32_t, i) = VEC_AT(*holders, uint32_t, holders->size - 1);
            holders->size--;
            return;
        }
    }
}

static void add_waiting(eng_engine *engine, uint32_t ractor, int64_t delta) {
    RACTOR(engine, ractor)->waiting += delta;
    engine->waiting_total += delta;
}

// ---------------------------------------------------------------- blame (at close, in time order)

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
static void blame_wait(eng_engine *engine, uint32_t at, int64_t start, int64_t end, bool after_blocking) {
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

static void blame_hold(eng_engine *engine, uint32_t at, const eng_interval *interval) {
    eng_ractor *ractor = RACTOR(engine, THREAD(engine, at)->ractor);
    eng_hold *hold = vec_push(&engine->memory, &ractor->holds);
    hold->start = interval->start;
    hold->end = interval->end;
    hold->thread = at;
    hold->gc = interval->state == ST_GC;
    if (ractor->holds.size - ractor->holds_head > ractor->prune_at) prune_holds(engine, ractor);
}

// The holders' samples taken during a wait (CodeLocations#holders_while_waiting).
static void samples_during(eng_engine *engine, uint32_t at, int64_t start, int64_t end) {
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

// ---------------------------------------------------------------- overview

static int64_t *lane_bins(eng_engine *engine, eng_thread *thread, int32_t first, int32_t last) {
    if (!thread->bins) {
        int32_t count = last - first + 1;
        int32_t capacity = count < 64 ? 64 : count;
        if (first + capacity > (int32_t)engine->bins) capacity = (int32_t)engine->bins - first;
        thread->bins = eng_alloc(&engine->memory, (size_t)capacity * 4 * sizeof(int64_t));
        thread->bin_low = first;
        thread->bin_count = capacity;
        return thread->bins;
    }
    int32_t low = first < thread->bin_low ? first : thread->bin_low;
    int32_t high = thread->bin_low + thread->bin_count - 1;
    if (last > high) high = last;
    if (low == thread->bin_low && high == thread->bin_low + thread->bin_count - 1) return thread->bins;
    int32_t count = high - low + 1;
    if (low == thread->bin_low) { // growing toward the end, as a thread's time goes: doubling
        int32_t doubled = thread->bin_count * 2;
        if (doubled > count) count = doubled;
        if (low + count > (int32_t)engine->bins) count = (int32_t)engine->bins - low;
    }
    int64_t *bins = eng_alloc(&engine->memory, (size_t)count * 4 * sizeof(int64_t));
    memcpy(bins + (size_t)(thread->bin_low - low) * 4, thread->bins, (size_t)thread->bin_count * 4 * sizeof(int64_t));
    eng_free(&engine->memory, thread->bins, (size_t)thread->bin_count * 4 * sizeof(int64_t));
    thread->bins = bins;
    thread->bin_low = low;
    thread->bin_count = count;
    return bins;
}

// Analysis::Overview#add: [start, end) spread over the bins it covers.
static void overview_add(eng_engine *engine, eng_thread *thread, const eng_interval *interval) {
    int offset;
    switch (interval->state) {
    case ST_RUN: offset = 0; break;
    case ST_WAIT: offset = 1; break;
    case ST_IDLE: offset = 2; break;
    case ST_GC: offset = 3; break;
    default: return;
    }
    if (interval->end <= interval->start) return;
    int64_t last_bin = engine->bins - 1;
    int64_t from = interval->start, to = interval->end, bin_ns = engine->bin_ns;
    int64_t first = from / bin_ns, last = (to - 1) / bin_ns;
    if (first > last_bin) first = last_bin;
    if (first < 0) first = 0;
    if (last > last_bin) last = last_bin;
    if (last < 0) last = 0;
    int64_t *bins = lane_bins(engine, thread, (int32_t)first, (int32_t)last);
    int64_t *base = bins - (size_t)thread->bin_low * 4;
    if (first == last) {
        base[4 * first + offset] += to - from;
        return;
    }
    base[4 * first + offset] += (first + 1) * bin_ns - from;
    for (int64_t bin = first + 1; bin < last; bin++) base[4 * bin + offset] += bin_ns;
    base[4 * last + offset] += to - last * bin_ns;
}

// ---------------------------------------------------------------- final intervals, per thread

static void commit_release(eng_engine *engine, uint32_t at, eng_thread *thread) {
    uint64_t key = (uint64_t)at << 36 | (uint64_t)thread->release_site << 4 | thread->release_reason;
    eng_pair *entry = pair(engine, &engine->sites, &engine->site_of, key, at, thread->release_site);
    entry->reason = thread->release_reason;
    entry->all_ns += thread->release_waited;
    entry->count++;
    thread->release_open = 0;
}

static bool found_less(const eng_found *a, const eng_found *b) {
    if (a->interval.start != b->interval.start) return a->interval.start < b->interval.start;
    if (a->thread_order != b->thread_order) return a->thread_order < b->thread_order;
    return a->listed < b->listed;
}

// A window keeps the +limit+ first intervals (by start, then thread order, then the thread's own
// order) in a max-heap.
static void window_offer(eng_engine *engine, eng_window *window, const eng_found *found) {
    eng_vec *heap = &window->found;
    if (window->limit == 0) return;
    size_t at;
    if (heap->size < window->limit) {
        vec_push(&engine->memory, heap);
        at = heap->size - 1;
        while (at > 0) {
            size_t parent = (at - 1) / 2;
            if (!found_less(&VEC_AT(*heap, eng_found, parent), found)) break;
            VEC_AT(*heap, eng_found, at) = VEC_AT(*heap, eng_found, parent);
            at = parent;
        }
        VEC_AT(*heap, eng_found, at) = *found;
        return;
    }
    if (!found_less(found, &VEC_AT(*heap, eng_found, 0))) return;
    at = 0;
    for (;;) {
        size_t child = 2 * at + 1;
        if (child >= heap->size) break;
        if (child + 1 < heap->size && found_less(&VEC_AT(*heap, eng_found, child), &VEC_AT(*heap, eng_found, child + 1))) {
            child++;
        }
        if (!found_less(found, &VEC_AT(*heap, eng_found, child))) break;
        VEC_AT(*heap, eng_found, at) = VEC_AT(*heap, eng_found, child);
        at = child;
    }
    VEC_AT(*heap, eng_found, at) = *found;
}

static int compare_found(const void *a, const void *b) {
    if (found_less(a, b)) return -1;
    return found_less(b, a) ? 1 : 0;
}

void eng_windows_sorted(eng_engine *engine) {
    for (size_t i = 0; i < engine->window_count; i++) {
        eng_vec *found = &engine->windows[i].found;
        if (found->size > 1) qsort(found->data, found->size, sizeof(eng_found), compare_found);
    }
}

// Ends the thread's hold streak: a long one (a timeslice held or more) ended by a pause counts.
static void streak_close(eng_engine *engine, eng_thread *thread, bool paused) {
    if (!thread->streak_open) return;
    thread->streak_open = 0;
    if (!paused || thread->streak_held < engine->timeslice_ns) return;
    thread->long_streaks++;
    thread->long_streak_held += thread->streak_held;
    if (thread->streak_held > thread->longest_streak_held) {
        thread->has_longest_streak = 1;
        thread->longest_streak[0] = thread->streak_start;
        thread->longest_streak[1] = thread->streak_end;
        thread->longest_streak_held = thread->streak_held;
    }
}

// A hold streak goes on across waits and idles shorter than a quarter timeslice (thread_stats.rb's Streaks).
static void streak_add(eng_engine *engine, eng_thread *thread, const eng_interval *interval) {
    uint8_t state = interval->state;
    if (state == ST_RUN || state == ST_GC) {
        if (!thread->streak_open) {
            thread->streak_open = 1;
            thread->streak_start = interval->start;
            thread->streak_held = 0;
        }
        thread->streak_held += interval->end - interval->start;
        thread->streak_end = interval->end;
    } else if (state == ST_IDLE && interval->end - interval->start >= engine->slow_wait_ns) {
        streak_close(engine, thread, true);
    } else if (state == ST_EXITED || state == ST_STARTED) {
        streak_close(engine, thread, false);
    }
}

// The hook's bounds (ReferenceIOOverlap, in the tests): a release shorter than this returned at once; a
// hold this long or more is other work.
#define QUICK_RELEASE_NS 1000000
#define OVERLAP_HOLD_NS 1000000

// The GVL wait that IO the thread had started overlapped (ReferenceIOOverlap, rule for rule).
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

static void on_final(eng_engine *engine, uint32_t at, const eng_interval *interval) {
    eng_thread *thread = THREAD(engine, at);
    int64_t duration = interval->end - interval->start;
    uint8_t state = interval->state;
    uint64_t listed = thread->listed++;
    if (engine->windows_only) goto windows;
    if (!engine->stats) goto exports;
    thread->totals[state] += duration;
    streak_add(engine, thread, interval);
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

static eng_interval *run_interval(eng_thread *thread) {
    if (thread->run_ref >= 0) return &thread->pending[thread->run_ref];
    if (thread->run_ref == RUN_REF_GHOST) return &thread->ghost;
    return NULL;
}

// Hands the intervals before the thread's last run (which may still change) to on_final.
static void settle(eng_engine *engine, uint32_t at) {
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
static void close_interval(eng_engine *engine, uint32_t at, int64_t time) {
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

// Timeline#release: what ended the run, told at SUSPENDED.
static void release(eng_engine *engine, uint32_t at, uint32_t stack) {
    eng_thread *thread = THREAD(engine, at);
    bool site = stack != 0 && stack < engine->stack_limit && engine->stack_causes[stack] != 0;
    uint8_t cause = site ? engine->stack_causes[stack] : R_BLOCKING;
    thread->site_cause = site ? cause : R_NONE;
    eng_interval *run = run_interval(thread);
    if (!run) return;
    if (!run->site) run->site = site ? stack : 0;
    if (!run->reason) run->reason = cause;
}

static const uint8_t INFERRED_BEFORE[] = {
    [EV_READY] = ST_IDLE, [EV_RESUMED] = ST_WAIT, [EV_SUSPENDED] = ST_RUN, [EV_EXITED] = ST_RUN,
    [EV_GC_ENTER] = ST_RUN, [EV_GC_EXIT] = ST_GC,
};

static void process_event(eng_engine *engine, const eng_item *item) {
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

// Timeline#add_samples: the holder's stack, kept when threads of its Ractor waited then.
static void process_sample(eng_engine *engine, const eng_item *item) {
    uint32_t at = thread_index(engine, item->serial);
    register_thread(engine, at);
    eng_thread *thread = THREAD(engine, at);
    int64_t waiters = RACTOR(engine, thread->ractor)->waiting;
    uint32_t stack = item->aux;
    bool known = stack != 0 && stack < engine->stack_limit && engine->stack_causes[stack] != 0;
    if (waiters <= 0 || !known) return;
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

// ---------------------------------------------------------------- the merge

static bool item_less(const eng_item *a, const eng_item *b) {
    return a->time < b->time || (a->time == b->time && a->index < b->index);
}

static int compare_items(const void *a, const void *b) {
    if (item_less(a, b)) return -1;
    return item_less(b, a) ? 1 : 0;
}

static const eng_item *cursor_item(const eng_cursor *cursor) { return &cursor->items[cursor->position]; }

static void heap_down(eng_engine *engine, size_t at) {
    eng_cursor *heap = engine->heap;
    for (;;) {
        size_t child = 2 * at + 1;
        if (child >= engine->heap_size) return;
        if (child + 1 < engine->heap_size && item_less(cursor_item(&heap[child + 1]), cursor_item(&heap[child]))) child++;
        if (!item_less(cursor_item(&heap[child]), cursor_item(&heap[at]))) return;
        eng_cursor swap = heap[at];
        heap[at] = heap[child];
        heap[child] = swap;
        at = child;
    }
}

static void heap_push(eng_engine *engine, eng_cursor cursor) {
    if (engine->heap_size == engine->heap_capacity) {
        size_t capacity = engine->heap_capacity ? engine->heap_capacity * 2 : 16;
        engine->heap = eng_realloc(&engine->memory, engine->heap, engine->heap_capacity * sizeof(eng_cursor),
                                   capacity * sizeof(eng_cursor));
        engine->heap_capacity = capacity;
    }
    size_t at = engine->heap_size++;
    engine->heap[at] = cursor;
    while (at > 0) {
        size_t parent = (at - 1) / 2;
        if (!item_less(cursor_item(&engine->heap[at]), cursor_item(&engine->heap[parent]))) break;
        eng_cursor swap = engine->heap[at];
        engine->heap[at] = engine->heap[parent];
        engine->heap[parent] = swap;
        at = parent;
    }
}

// Keeps the largest spent items buffer for the next chunk (chunks come one after another).
static void release_items(eng_engine *engine, eng_item *items, uint32_t capacity) {
    if (engine->spare_items && engine->spare_capacity >= capacity) {
        eng_free(&engine->memory, items, (size_t)capacity * sizeof(eng_item));
        return;
    }
    eng_free(&engine->memory, engine->spare_items, (size_t)engine->spare_capacity * sizeof(eng_item));
    engine->spare_items = items;
    engine->spare_capacity = capacity;
}

// Reads a chunk's records into items in (time, file order): ARG values attached to the record
// before them in the lane, SAMPLE records without an ARG dropped (Model::TraceFile's rules).
static int load_chunk(eng_engine *engine, size_t number) {
    eng_index *index = engine->index;
    eng_chunk *chunk = &index->chunks[number];
    if (engine->records_capacity < chunk->count) {
        engine->records = eng_realloc(&engine->memory, engine->records, engine->records_capacity * 8,
                                      (size_t)chunk->count * 8);
        engine->records_capacity = chunk->count;
    }
    int status = eng_read_records(index, chunk, engine->records);
    if (status) return status;
    eng_item *items;
    uint32_t capacity;
    if (engine->spare_items && engine->spare_capacity >= chunk->count) {
        items = engine->spare_items;
        capacity = engine->spare_capacity;
        engine->spare_items = NULL;
        engine->spare_capacity = 0;
    } else {
        capacity = chunk->count > 8192 ? chunk->count : 8192;
        items = eng_malloc(&engine->memory, (size_t)capacity * sizeof(eng_item));
    }
    uint32_t size = 0;
    int64_t last = -1;
    for (uint32_t i = 0; i < chunk->count; i++) {
        uint64_t record = engine->records[i];
        uint8_t kind = record & 15;
        uint32_t serial = (record >> 4) & 0xFFFFFF;
        if (index->stacks && kind == EV_ARG) {
            if (last >= 0 && (items[last].kind == EV_SUSPENDED || items[last].kind == EV_SAMPLE)) {
                items[last].aux = serial;
                items[last].has_arg = 1;
            }
            last = -1;
            continue;
        }
        eng_item *item = &items[size];
        item->time = chunk->base + (int64_t)(record >> 28);
        item->index = chunk->first_index + i;
        item->serial = serial;
        item->native = chunk->lane;
        item->aux = 0;
        item->kind = kind;
        item->has_arg = 0;
        last = size++;
    }
    if (last >= 0 && chunk->trailing_arg >= 0 && (items[last].kind == EV_SUSPENDED || items[last].kind == EV_SAMPLE)) {
        items[last].aux = (uint32_t)chunk->trailing_arg;
        items[last].has_arg = 1;
    }
    uint32_t kept = 0;
    for (uint32_t i = 0; i < size; i++) {
        if (items[i].kind == EV_SAMPLE && !items[i].has_arg) continue;
        items[kept++] = items[i];
    }
    if (!chunk->sorted && kept > 1) qsort(items, kept, sizeof(eng_item), compare_items);
    engine->bytes_done += (uint64_t)chunk->count * 8 + 32;
    if (kept == 0) {
        release_items(engine, items, capacity);
        return 0;
    }
    eng_cursor cursor = { items, kept, 0, (uint32_t)number, capacity };
    heap_push(engine, cursor);
    return 0;
}

// Chunks join the heap when their first item is due: the heap holds about one chunk per lane.
static int refill(eng_engine *engine) {
    eng_index *index = engine->index;
    while (engine->pending_next < engine->pending_count) {
        eng_chunk *chunk = &index->chunks[engine->pending_chunks[engine->pending_next]];
        if (engine->heap_size > 0) {
            const eng_item *top = cursor_item(&engine->heap[0]);
            if (top->time < chunk->min_time || (top->time == chunk->min_time && top->index < chunk->min_index)) break;
        }
        int status = load_chunk(engine, engine->pending_chunks[engine->pending_next]);
        engine->pending_next++;
        if (status) return status;
    }
    return 0;
}

static int peek(eng_engine *engine, const eng_item **item) {
    if (engine->index->items) {
        *item = engine->imported_next < engine->index->item_count ? &engine->index->items[engine->imported_next] : NULL;
        return 0;
    }
    int status = refill(engine);
    if (status) return status;
    *item = engine->heap_size ? cursor_item(&engine->heap[0]) : NULL;
    return 0;
}

static void pop(eng_engine *engine) {
    if (engine->index->items) {
        engine->imported_next++;
        engine->bytes_done += 8;
        return;
    }
    eng_cursor *top = &engine->heap[0];
    if (++top->position < top->size) {
        heap_down(engine, 0);
        return;
    }
    release_items(engine, top->items, top->capacity);
    engine->heap[0] = engine->heap[--engine->heap_size];
    heap_down(engine, 0);
}

static const eng_index *sort_index; // qsort has no context argument

static int compare_chunks(const void *a, const void *b) {
    const eng_chunk *x = &sort_index->chunks[*(const size_t *)a], *y = &sort_index->chunks[*(const size_t *)b];
    if (x->min_time != y->min_time) return x->min_time < y->min_time ? -1 : 1;
    if (x->min_index != y->min_index) return x->min_index < y->min_index ? -1 : 1;
    return 0;
}

eng_engine *eng_pass_new(eng_index *index) {
    eng_memory memory = { 0, 0 };
    eng_engine *engine = eng_alloc(&memory, sizeof(eng_engine));
    engine->memory = memory;
    engine->index = index;
    engine->spill_fd = -1;
    engine->median_budget = (size_t)8 << 20; // exact values over all medians: 64 MB
    engine->stats = true;
    vec_init(&engine->threads, sizeof(eng_thread));
    vec_init(&engine->order, sizeof(uint32_t));
    vec_init(&engine->cursor_order, sizeof(uint32_t));
    vec_init(&engine->ractors, sizeof(eng_ractor));
    vec_init(&engine->samples, sizeof(eng_sample));
    vec_init(&engine->pairs, sizeof(eng_pair));
    vec_init(&engine->holder_stacks, sizeof(eng_pair));
    vec_init(&engine->stacks_sampled, sizeof(eng_pair));
    vec_init(&engine->waiter_stacks, sizeof(eng_pair));
    vec_init(&engine->sites, sizeof(eng_pair));
    map_init(&engine->memory, &engine->thread_of, 64);
    engine->small_serials = eng_alloc(&engine->memory, SMALL_SERIALS * sizeof(uint32_t));
    map_init(&engine->memory, &engine->ractor_of, 8);
    map_init(&engine->memory, &engine->ractor_id_of, 64);
    map_init(&engine->memory, &engine->pair_of, 64);
    map_init(&engine->memory, &engine->holder_stack_of, 16);
    map_init(&engine->memory, &engine->stack_sampled_of, 16);
    map_init(&engine->memory, &engine->waiter_stack_of, 16);
    map_init(&engine->memory, &engine->site_of, 16);
    map_init(&engine->memory, &engine->native_owner, 16);
    vec_init(&engine->counter.blocks, sizeof(uint64_t));
    return engine;
}

void eng_pass_configure_thread(eng_engine *engine, uint32_t serial, uint32_t ractor_id) {
    map_put(&engine->memory, &engine->ractor_id_of, serial, ractor_id);
}

void eng_pass_add_window(eng_engine *engine, int64_t start, int64_t end, uint64_t limit) {
    engine->windows = eng_realloc(&engine->memory, engine->windows, engine->window_count * sizeof(eng_window),
                                  (engine->window_count + 1) * sizeof(eng_window));
    eng_window *window = &engine->windows[engine->window_count++];
    window->start = start;
    window->end = end;
    window->limit = limit;
    vec_init(&window->found, sizeof(eng_found));
}

// Threads of the index, each in the state its first event implies from time 0.
static void start(eng_engine *engine) {
    eng_index *index = engine->index;
    engine->slow_wait_ns = engine->timeslice_ns / 4;
    if (engine->bins) {
        engine->bin_ns = (engine->duration_ns + engine->bins - 1) / engine->bins;
        if (engine->bin_ns < 1) engine->bin_ns = 1;
    }
    for (size_t i = 0; i < index->firsts.size; i++) {
        eng_first *first = &VEC_AT(index->firsts, eng_first, i);
        uint32_t at = thread_index(engine, first->serial);
        eng_thread *thread = THREAD(engine, at);
        thread->first_kind = first->first_kind;
        if (first->first_kind == EV_STARTED || first->first_kind > EV_GC_EXIT) continue;
        set_state(engine, at, INFERRED_BEFORE[first->first_kind]);
        thread = THREAD(engine, at);
        thread->since = 0;
        if (thread->state == ST_IDLE) thread->reason = R_UNKNOWN;
    }
    if (!index->items) {
        engine->pending_capacity = index->chunk_count ? index->chunk_count : 1;
        engine->pending_chunks = eng_alloc(&engine->memory, engine->pending_capacity * sizeof(size_t));
        size_t count = 0;
        for (size_t i = 0; i < index->chunk_count; i++) {
            if (index->chunks[i].has_items) engine->pending_chunks[count++] = i;
        }
        sort_index = index;
        if (count > 1) qsort(engine->pending_chunks, count, sizeof(size_t), compare_chunks);
        // Chunks without items are never loaded: counted as read.
        for (size_t i = 0; i < index->chunk_count; i++) {
            if (!index->chunks[i].has_items) engine->bytes_done += (uint64_t)index->chunks[i].count * 8 + 32;
        }
        engine->pending_next = 0;
        engine->pending_count = count;
    }
}

static void finish(eng_engine *engine) {
    engine->finished = true;
    for (size_t i = 0; i < engine->cursor_order.size; i++) {
        uint32_t at = VEC_AT(engine->cursor_order, uint32_t, i);
        close_interval(engine, at, engine->duration_ns);
        set_state(engine, at, ST_GONE);
    }
    for (size_t at = 0; at < engine->threads.size; at++) {
        THREAD(engine, at)->run_ref = RUN_REF_NONE;
        settle(engine, (uint32_t)at);
        eng_thread *thread = THREAD(engine, at);
        if (thread->hold_open) {
            thread->hold_histogram[bit_length(thread->hold_ns)]++;
            thread->hold_open = 0;
        }
        if (thread->release_open) commit_release(engine, (uint32_t)at, thread);
        if (engine->stats) streak_close(engine, thread, false);
        if (engine->spill) eng_stream_finish(engine, &THREAD(engine, at)->stream);
    }
    if (engine->counter_open) {
        if (engine->spill) eng_counter_add(engine, engine->counter_time, engine->counter_value);
        engine->counter_entries++;
        engine->counter_open = false;
    }
    if (engine->spill) eng_stream_finish(engine, &engine->counter);
    eng_windows_sorted(engine);
}

// A pass that only collects windows can stop once nothing can add to them: every thread's
// current state and every interval not final yet begins after the last window ends.
static bool windows_settled(eng_engine *engine) {
    int64_t last_end = INT64_MIN;
    for (size_t i = 0; i < engine->window_count; i++) {
        if (engine->windows[i].end > last_end) last_end = engine->windows[i].end;
    }
    if (engine->now < last_end) return false;
    for (size_t at = 0; at < engine->threads.size; at++) {
        eng_thread *thread = THREAD(engine, at);
        bool open = thread->state != ST_NONE && thread->state != ST_GONE;
        if (open && thread->since < last_end) return false;
        if (thread->pending_size > 0 && thread->pending[0].start < last_end) return false;
    }
    return true;
}

int eng_pass_step(eng_engine *engine, uint64_t budget_bytes, bool *done) {
    *done = false;
    if (engine->finished) {
        *done = true;
        return 0;
    }
    if (!engine->started) {
        start(engine);
        engine->started = true;
    }
    uint64_t begin = engine->bytes_done;
    while (engine->bytes_done - begin < budget_bytes) {
        const eng_item *item;
        int status = peek(engine, &item);
        if (status) return status;
        if (!item) {
            finish(engine);
            *done = true;
            return 0;
        }
        // Every item of the same time: samples first (Timeline#build adds the samples up to an
        // event's time before the event), then events, each in file order.
        engine->group_size = 0;
        int64_t time = item->time;
        while (item && item->time == time) {
            if (engine->group_size == engine->group_capacity) {
                size_t capacity = engine->group_capacity ? engine->group_capacity * 2 : 16;
                engine->group = eng_realloc(&engine->memory, engine->group, engine->group_capacity * sizeof(eng_item),
                                            capacity * sizeof(eng_item));
                engine->group_capacity = capacity;
            }
            engine->group[engine->group_size++] = *item;
            pop(engine);
            status = peek(engine, &item);
            if (status) return status;
        }
        engine->now = time;
        for (size_t i = 0; i < engine->group_size; i++) {
            if (engine->group[i].kind == EV_SAMPLE) process_sample(engine, &engine->group[i]);
        }
        for (size_t i = 0; i < engine->group_size; i++) {
            if (engine->group[i].kind != EV_SAMPLE) process_event(engine, &engine->group[i]);
        }
        if (engine->windows_only && (++engine->groups & 4095) == 0 && windows_settled(engine)) {
            engine->finished = true;
            eng_windows_sorted(engine);
            *done = true;
            return 0;
        }
    }
    return 0;
}

void eng_pass_free(eng_engine *engine) {
    eng_memory *memory = &engine->memory;
    for (size_t at = 0; at < engine->threads.size; at++) {
        eng_thread *thread = THREAD(engine, at);
        eng_free(memory, thread->pending, thread->pending_capacity * sizeof(eng_interval));
        eng_median_free(memory, &thread->wait_median);
        eng_median_free(memory, &thread->slow_median);
        eng_free(memory, thread->bins, (size_t)thread->bin_count * 4 * sizeof(int64_t));
        eng_stream_free(engine, &thread->stream);
    }
    for (size_t i = 0; i < engine->ractors.size; i++) {
        eng_ractor *ractor = RACTOR(engine, i);
        vec_free(memory, &ractor->holds);
        vec_free(memory, &ractor->hold_sums);
        vec_free(memory, &ractor->holders);
        vec_free(memory, &ractor->members);
    }
    for (size_t i = 0; i < engine->heap_size; i++) {
        eng_free(memory, engine->heap[i].items, (size_t)engine->heap[i].capacity * sizeof(eng_item));
    }
    eng_free(memory, engine->spare_items, (size_t)engine->spare_capacity * sizeof(eng_item));
    for (size_t i = 0; i < engine->window_count; i++) vec_free(memory, &engine->windows[i].found);
    eng_free(memory, engine->windows, engine->window_count * sizeof(eng_window));
    eng_stream_free(engine, &engine->counter);
    eng_median_free(memory, &engine->all_waits);
    vec_free(memory, &engine->threads);
    vec_free(memory, &engine->order);
    vec_free(memory, &engine->cursor_order);
    vec_free(memory, &engine->ractors);
    vec_free(memory, &engine->samples);
    vec_free(memory, &engine->pairs);
    vec_free(memory, &engine->holder_stacks);
    vec_free(memory, &engine->stacks_sampled);
    vec_free(memory, &engine->waiter_stacks);
    vec_free(memory, &engine->sites);
    map_free(memory, &engine->thread_of);
    eng_free(memory, engine->small_serials, SMALL_SERIALS * sizeof(uint32_t));
    map_free(memory, &engine->ractor_of);
    map_free(memory, &engine->ractor_id_of);
    map_free(memory, &engine->pair_of);
    map_free(memory, &engine->holder_stack_of);
    map_free(memory, &engine->stack_sampled_of);
    map_free(memory, &engine->waiter_stack_of);
    map_free(memory, &engine->site_of);
    map_free(memory, &engine->native_owner);
    eng_free(memory, engine->heap, engine->heap_capacity * sizeof(eng_cursor));
    eng_free(memory, engine->records, engine->records_capacity * 8);
    eng_free(memory, engine->group, engine->group_capacity * sizeof(eng_item));
    // Not a word of the index here: the GC may have freed it first, in the same sweep.
    eng_free(memory, engine->pending_chunks, engine->pending_capacity * sizeof(size_t));
    eng_free(memory, engine->stack_causes, engine->stack_limit);
    if (engine->spill_fd >= 0) close(engine->spill_fd);
    free(engine->spill_dir);
    free(engine);
}
