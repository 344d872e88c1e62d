// The HTML overview (Analysis::Overview): each closed interval's time spread over the bins it
// covers, per thread and state (run, wait, idle, gc); a thread keeps only the bins it reached.
#include <string.h>

#include "pass_shared.h"

static int64_t *lane_bins(eng_engine *engine, eng_thread *thread, int32_t first, int32_t last) {
    if (!thread->bins) {
        int32_t count = last - first + 1;
        int32_t capacity = count < 64 ? 64 : count;
        if (first + capacity > (int32_t)engine->bins) capacity = (int32_t)engine->bins - first;
        thread->bins = eng_alloc(&engine->memory, (size_t)capacity * LANE_STATES * sizeof(int64_t));
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
    int64_t *bins = eng_alloc(&engine->memory, (size_t)count * LANE_STATES * sizeof(int64_t));
    memcpy(bins + (size_t)(thread->bin_low - low) * LANE_STATES, thread->bins, (size_t)thread->bin_count * LANE_STATES * sizeof(int64_t));
    eng_free(&engine->memory, thread->bins, (size_t)thread->bin_count * LANE_STATES * sizeof(int64_t));
    thread->bins = bins;
    thread->bin_low = low;
    thread->bin_count = count;
    return bins;
}

// Analysis::Overview#add: [start, end) spread over the bins it covers.
void overview_add(eng_engine *engine, eng_thread *thread, const eng_interval *interval) {
    int offset;
    switch (interval->state) {
#define LANE_CASE(state) case state: offset = LANE_##state; break;
    ENG_LANE_STATES(LANE_CASE)
#undef LANE_CASE
    default: return; // :started and :exited take a moment: no time to count
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
    int64_t *base = bins - (size_t)thread->bin_low * LANE_STATES;
    if (first == last) {
        base[LANE_STATES * first + offset] += to - from;
        return;
    }
    base[LANE_STATES * first + offset] += (first + 1) * bin_ns - from;
    for (int64_t bin = first + 1; bin < last; bin++) base[LANE_STATES * bin + offset] += bin_ns;
    base[LANE_STATES * last + offset] += to - last * bin_ns;
}
