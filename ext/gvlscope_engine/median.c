// Medians, exact while they fit a budget, else from a log-linear histogram (median.h has the
// numbers): every wait's median (ThreadStats::Row's and the report's) without keeping every wait
// of a long trace.
#include <stdlib.h>
#include <string.h>

#include "pass_shared.h"

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

void median_push(eng_engine *engine, eng_median *median, int64_t value) {
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
