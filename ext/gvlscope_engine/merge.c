// The merge: the chunks' items in (time, file order) across lanes. A chunk's records are read
// when its first item is due (ARG values attached, unpaired SAMPLEs dropped, sorted if they were
// not), so the heap holds about one chunk per lane; imported events are already in order.
#include <stdlib.h>

#include "pass_shared.h"

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
        uint8_t kind = (uint8_t)gvls_record_kind(record);
        uint32_t serial = gvls_record_value(record);
        if (index->args && kind >= EV_TURN_BEGIN && kind <= EV_TURN_READY) {
            last = -1;  // not an item (Index#turns has them); its ARG attaches to nothing here
            continue;
        }
        if (index->args && kind == EV_ARG) {
            if (last >= 0 && (items[last].kind == EV_SUSPENDED || items[last].kind == EV_SAMPLE)) {
                items[last].aux = serial;
                items[last].has_arg = 1;
            }
            last = -1;
            continue;
        }
        eng_item *item = &items[size];
        item->time = chunk->base + (int64_t)gvls_record_delta(record);
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

int peek(eng_engine *engine, const eng_item **item) {
    if (engine->index->items) {
        *item = engine->imported_next < engine->index->item_count ? &engine->index->items[engine->imported_next] : NULL;
        return 0;
    }
    int status = refill(engine);
    if (status) return status;
    *item = engine->heap_size ? cursor_item(&engine->heap[0]) : NULL;
    return 0;
}

void pop(eng_engine *engine) {
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
