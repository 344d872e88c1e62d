// The histograms' log2 buckets and the medians (median.c).
#ifndef GVLSCOPE_ENGINE_MEDIAN_H
#define GVLSCOPE_ENGINE_MEDIAN_H

#include <stddef.h>
#include <stdint.h>

#define LOG2_BUCKETS 64
static inline unsigned log2_bucket(uint64_t value) { return value ? 64u - (unsigned)__builtin_clzll(value) : 0u; }
// Ruby's Integer#bit_length of a possibly negative value (a corrupt trace's negative duration).
static inline unsigned bit_length(int64_t value) { return log2_bucket(value < 0 ? ~(uint64_t)value : (uint64_t)value); }

// ---- medians: exact (values.sort[size / 2]) while the values fit a budget, else from a
// log-linear histogram (128 sub-buckets per power of two: within 1 %).
#define MEDIAN_SUB_BITS 7
#define MEDIAN_BUCKETS ((64 - MEDIAN_SUB_BITS + 1) << MEDIAN_SUB_BITS)
typedef struct {
    int64_t *values;
    size_t size;
    size_t capacity;
    uint64_t *histogram; // non-NULL once it fell back
    uint64_t count;
} eng_median;

#endif
