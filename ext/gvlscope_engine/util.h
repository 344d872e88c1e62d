// Counted allocation, growable arrays and an integer map (util.c): what every table of the engine
// is made of.
#ifndef GVLSCOPE_ENGINE_UTIL_H
#define GVLSCOPE_ENGINE_UTIL_H

#include <stddef.h>
#include <stdint.h>

// ---- memory: every allocation of the engine is counted, so tests can assert its peak size.
typedef struct {
    size_t current;
    size_t peak;
} eng_memory;

void *eng_alloc(eng_memory *memory, size_t bytes);                        // zeroed
void *eng_malloc(eng_memory *memory, size_t bytes);                       // not zeroed
void *eng_realloc(eng_memory *memory, void *pointer, size_t old_bytes, size_t new_bytes); // new part zeroed
void eng_free(eng_memory *memory, void *pointer, size_t bytes);

// A growable array of fixed-size elements.
typedef struct {
    char *data;
    size_t size;      // elements
    size_t capacity;  // elements
    size_t element;   // bytes per element
} eng_vec;

void vec_init(eng_vec *vec, size_t element);
void *vec_push(eng_memory *memory, eng_vec *vec); // a zeroed new element
void vec_free(eng_memory *memory, eng_vec *vec);
#define VEC_AT(vec, type, index) (((type *)(vec).data)[index])

// Open addressing map from a 64-bit key to a 32-bit value (an index into some array).
typedef struct {
    uint64_t *keys;
    uint32_t *values;
    size_t capacity; // a power of two; slot empty when values[i] == UINT32_MAX
    size_t size;
} eng_map;

void map_init(eng_memory *memory, eng_map *map, size_t capacity);
uint32_t map_get(const eng_map *map, uint64_t key); // UINT32_MAX when absent
void map_put(eng_memory *memory, eng_map *map, uint64_t key, uint32_t value);
void map_free(eng_memory *memory, eng_map *map);

#endif
