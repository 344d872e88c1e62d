// The log2 bucket shared by all histograms, as DTrace's quantize: bucket 0 holds 0, bucket b >= 1
// holds values in [2^(b-1), 2^b).
#ifndef GVLSCOPE_HISTOGRAM_H
#define GVLSCOPE_HISTOGRAM_H

#include <stdint.h>

static inline unsigned gvls_log2_bucket(uint64_t value) {
    return value ? 64u - (unsigned)__builtin_clzll(value) : 0u;
}

#endif
