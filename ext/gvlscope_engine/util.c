// Counted allocation, growable arrays and an integer map (util.h).
#include <stdlib.h>
#include <string.h>

#include "engine.h"

void *eng_alloc(eng_memory *memory, size_t bytes) {
    void *pointer = calloc(1, bytes ? bytes : 1);
    if (!pointer) abort(); // the engine's tables are sized by the trace: out of memory is fatal, as in Ruby
    memory->current += bytes;
    if (memory->current > memory->peak) memory->peak = memory->current;
    return pointer;
}

void *eng_malloc(eng_memory *memory, size_t bytes) {
    void *pointer = malloc(bytes ? bytes : 1);
    if (!pointer) abort();
    memory->current += bytes;
    if (memory->current > memory->peak) memory->peak = memory->current;
    return pointer;
}

void *eng_realloc(eng_memory *memory, void *pointer, size_t old_bytes, size_t new_bytes) {
    char *grown = realloc(pointer, new_bytes ? new_bytes : 1);
    if (!grown) abort();
    if (new_bytes > old_bytes) memset(grown + old_bytes, 0, new_bytes - old_bytes);
    memory->current = memory->current - old_bytes + new_bytes;
    if (memory->current > memory->peak) memory->peak = memory->current;
    return grown;
}

void eng_free(eng_memory *memory, void *pointer, size_t bytes) {
    if (!pointer) return;
    free(pointer);
    memory->current -= bytes;
}

void vec_init(eng_vec *vec, size_t element) {
    memset(vec, 0, sizeof(*vec));
    vec->element = element;
}

void *vec_push(eng_memory *memory, eng_vec *vec) {
    if (vec->size == vec->capacity) {
        size_t capacity = vec->capacity ? vec->capacity * 2 : 16;
        vec->data = eng_realloc(memory, vec->data, vec->capacity * vec->element, capacity * vec->element);
        vec->capacity = capacity;
    }
    void *slot = vec->data + vec->size * vec->element;
    memset(slot, 0, vec->element);
    vec->size++;
    return slot;
}

void vec_free(eng_memory *memory, eng_vec *vec) {
    eng_free(memory, vec->data, vec->capacity * vec->element);
    vec->data = NULL;
    vec->size = vec->capacity = 0;
}

static inline uint64_t mix(uint64_t key) {
    key ^= key >> 33;
    key *= UINT64_C(0xff51afd7ed558ccd);
    key ^= key >> 33;
    return key;
}

void map_init(eng_memory *memory, eng_map *map, size_t capacity) {
    size_t size = 16;
    while (size < capacity * 2) size *= 2;
    map->capacity = size;
    map->size = 0;
    map->keys = eng_alloc(memory, size * sizeof(uint64_t));
    map->values = eng_alloc(memory, size * sizeof(uint32_t));
    memset(map->values, 0xff, size * sizeof(uint32_t));
}

uint32_t map_get(const eng_map *map, uint64_t key) {
    size_t mask = map->capacity - 1;
    for (size_t slot = mix(key) & mask;; slot = (slot + 1) & mask) {
        if (map->values[slot] == UINT32_MAX) return UINT32_MAX;
        if (map->keys[slot] == key) return map->values[slot];
    }
}

static void map_insert(eng_map *map, uint64_t key, uint32_t value) {
    size_t mask = map->capacity - 1;
    for (size_t slot = mix(key) & mask;; slot = (slot + 1) & mask) {
        if (map->values[slot] == UINT32_MAX) {
            map->keys[slot] = key;
            map->values[slot] = value;
            map->size++;
            return;
        }
        if (map->keys[slot] == key) {
            map->values[slot] = value;
            return;
        }
    }
}

void map_put(eng_memory *memory, eng_map *map, uint64_t key, uint32_t value) {
    if ((map->size + 1) * 2 > map->capacity) {
        eng_map grown;
        map_init(memory, &grown, map->capacity);
        for (size_t slot = 0; slot < map->capacity; slot++) {
            if (map->values[slot] != UINT32_MAX) map_insert(&grown, map->keys[slot], map->values[slot]);
        }
        map_free(memory, map);
        *map = grown;
    }
    map_insert(map, key, value);
}

void map_free(eng_memory *memory, eng_map *map) {
    eng_free(memory, map->keys, map->capacity * sizeof(uint64_t));
    eng_free(memory, map->values, map->capacity * sizeof(uint32_t));
    map->keys = NULL;
    map->values = NULL;
    map->capacity = map->size = 0;
}
