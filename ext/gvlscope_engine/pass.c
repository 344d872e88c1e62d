// One pass: the chunks merged in time order, the timeline's state machine replayed event by event
// (test/support/reference_timeline.rb, the test oracle, rule for rule: keep the two in step), and every consumer fed
// as intervals close. Nothing here keeps an interval once its consumers have seen it.
//
// Two streams of intervals leave the state machine:
// - at close, in time order across threads: the blame (who held the GVL during each wait),
//   the samples during each wait, the overview's bins;
// - once final, in each thread's order: a run interval's release cause can still change after
//   it closed (a READY that turns the release into a preemption, an EXITED), so each thread's
//   intervals wait from its last run on; then the rows, histograms, release sites, detail
//   windows and the exports' spill read them.
//
// This file holds the pass's life: creating it, the state every thread starts in, the steps (a
// group of items of the same time at a time), the end of the trace, and freeing it. The rest:
//   merge.c          the items of all chunks in (time, file order)
//   state_machine.c  the timeline's rules, event by event; intervals as they close and settle
//   threads.c        threads, Ractors and the pairs the consumers sum into
//   blame.c          at close: each wait's blame and the holders' samples during it
//   overview.c       at close: the HTML overview's bins
//   thread_stats.c   once final: rows, streaks, IO overlap, histograms, release sites (and the
//                    exports' names and spill, and the windows)
//   windows.c        once final: the detail windows' intervals
//   cpu_time.c       of a hold, the time its native thread was off a CPU (the trace's CPU chunks)
//   median.c         exact-or-histogram medians
//   spill.c          the exports' copy of the intervals
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pass_shared.h"

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
    vec_init(&engine->lone_samples, sizeof(eng_sample));
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
        eng_free(memory, thread->bins, (size_t)thread->bin_count * LANE_STATES * sizeof(int64_t));
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
    cpu_time_free(engine);
    eng_median_free(memory, &engine->all_waits);
    vec_free(memory, &engine->threads);
    vec_free(memory, &engine->order);
    vec_free(memory, &engine->cursor_order);
    vec_free(memory, &engine->ractors);
    vec_free(memory, &engine->samples);
    vec_free(memory, &engine->lone_samples);
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
