// Detail windows (Analysis::Report#detail; Scan#intervals asks for one window over everything):
// each keeps the first +limit+ final intervals that meet it, in a max-heap; and when a pass that
// only collects windows may stop.

#include "pass_shared.h"

static bool found_less(const eng_found *a, const eng_found *b) {
    if (a->interval.start != b->interval.start) return a->interval.start < b->interval.start;
    if (a->thread_order != b->thread_order) return a->thread_order < b->thread_order;
    return a->listed < b->listed;
}

// Puts +found+ at the top of the max-heap of +size+ items and moves it down to its place.
static void sift_down(void *data, size_t size, const eng_found *found) {
    eng_found *items = (eng_found *)data;
    size_t at = 0;
    for (;;) {
        size_t child = 2 * at + 1;
        if (child >= size) break;
        if (child + 1 < size && found_less(&items[child], &items[child + 1])) child++;
        if (!found_less(found, &items[child])) break;
        items[at] = items[child];
        at = child;
    }
    items[at] = *found;
}

// A window keeps the +limit+ first intervals (by start, then thread order, then the thread's own
// order) in a max-heap.
void window_offer(eng_engine *engine, eng_window *window, const eng_found *found) {
    eng_vec *heap = &window->found;
    if (window->limit == 0) return;
    size_t at;
    if (heap->size < window->limit) {
        if (heap->size == heap->capacity) { // grown to the limit at most: no room for twice the intervals kept
            size_t capacity = heap->capacity ? heap->capacity * 2 : 16;
            if (capacity > window->limit) capacity = (size_t)window->limit;
            heap->data = eng_realloc(&engine->memory, heap->data, heap->capacity * heap->element, capacity * heap->element);
            heap->capacity = capacity;
        }
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
    sift_down(heap->data, heap->size, found);
}

// Sorted in place from the max-heap (heapsort): no second copy of a window of a million, as
// qsort's merge sort would make.
void eng_windows_sorted(eng_engine *engine) {
    for (size_t i = 0; i < engine->window_count; i++) {
        eng_vec *found = &engine->windows[i].found;
        eng_found *items = (eng_found *)found->data;
        for (size_t end = found->size; end > 1; end--) {
            eng_found last = items[end - 1];
            items[end - 1] = items[0];
            sift_down(found->data, end - 1, &last);
        }
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
