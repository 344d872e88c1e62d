// Detail windows (Analysis::Report#detail; Scan#intervals asks for one window over everything):
// each keeps the first +limit+ final intervals that meet it, in a max-heap; and when a pass that
// only collects windows may stop.
#include <stdlib.h>

#include "pass_shared.h"

static bool found_less(const eng_found *a, const eng_found *b) {
    if (a->interval.start != b->interval.start) return a->interval.start < b->interval.start;
    if (a->thread_order != b->thread_order) return a->thread_order < b->thread_order;
    return a->listed < b->listed;
}

// A window keeps the +limit+ first intervals (by start, then thread order, then the thread's own
// order) in a max-heap.
void window_offer(eng_engine *engine, eng_window *window, const eng_found *found) {
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

// A pass that only collects windows can stop once nothing can add to them: every thread's
// current state and every interval not final yet begins after the last window ends.
bool windows_settled(eng_engine *engine) {
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
