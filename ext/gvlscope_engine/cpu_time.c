// How long a hold's native thread ran on a CPU, from the CPU chunks (format.h, GVLS_CHUNK_CPU):
// the drain thread's ticks, and at each tick the native threads whose CPU time changed (one not
// listed kept its previous CPU time). A hold spanning two ticks ran only for what its native
// thread's CPU time grew between the first and the last tick inside it; the rest of that span
// the OS kept it off a CPU. And a hold ran at most what its native thread's CPU time grew from
// the tick before it to the tick after it. Either is a lower bound of the time off a CPU (the
// larger is taken): off-CPU time is never guessed, only measured.
#include <stdlib.h>
#include <string.h>

#include "pass_shared.h"

static int by_native_then_time(const void *a, const void *b) {
    const eng_cpu_sample *x = a, *y = b;
    if (x->native != y->native) return x->native < y->native ? -1 : 1;
    return (x->time > y->time) - (x->time < y->time);
}

static int by_time(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

// ticks: "q<" per CPU chunk; samples: "Q<Q<Q<" (native serial, time, CPU ns) per record.
void cpu_time_load(eng_engine *engine, const char *ticks, size_t tick_bytes, const char *samples, size_t sample_bytes) {
    eng_cpu *cpu = &engine->cpu;
    cpu->tick_count = tick_bytes / 8;
    cpu->sample_count = sample_bytes / 24;
    if (!cpu->tick_count || !cpu->sample_count) {
        cpu->tick_count = cpu->sample_count = 0;
        return;
    }
    cpu->ticks = eng_malloc(&engine->memory, cpu->tick_count * sizeof(int64_t));
    memcpy(cpu->ticks, ticks, cpu->tick_count * sizeof(int64_t));
    qsort(cpu->ticks, cpu->tick_count, sizeof(int64_t), by_time);
    cpu->samples = eng_malloc(&engine->memory, cpu->sample_count * sizeof(eng_cpu_sample));
    for (size_t i = 0; i < cpu->sample_count; i++) {
        uint64_t triple[3];
        memcpy(triple, samples + i * 24, 24);
        cpu->samples[i] = (eng_cpu_sample){ .native = (uint32_t)triple[0], .time = (int64_t)triple[1], .cpu = (int64_t)triple[2] };
    }
    qsort(cpu->samples, cpu->sample_count, sizeof(eng_cpu_sample), by_native_then_time);
}

void cpu_time_free(eng_engine *engine) {
    eng_cpu *cpu = &engine->cpu;
    eng_free(&engine->memory, cpu->ticks, cpu->tick_count * sizeof(int64_t));
    eng_free(&engine->memory, cpu->samples, cpu->sample_count * sizeof(eng_cpu_sample));
    memset(cpu, 0, sizeof(*cpu));
}

// The first tick at or after time.
static size_t tick_at_or_after(const eng_cpu *cpu, int64_t time) {
    size_t low = 0, high = cpu->tick_count;
    while (low < high) {
        size_t mid = low + (high - low) / 2;
        if (cpu->ticks[mid] < time) low = mid + 1; else high = mid;
    }
    return low;
}

// The native thread's last sample at or before time, or NULL (none yet).
static const eng_cpu_sample *sample_at(const eng_cpu *cpu, uint32_t native, int64_t time) {
    size_t low = 0, high = cpu->sample_count;  // first sample after (native, time)
    while (low < high) {
        size_t mid = low + (high - low) / 2;
        const eng_cpu_sample *s = &cpu->samples[mid];
        if (s->native < native || (s->native == native && s->time <= time)) low = mid + 1; else high = mid;
    }
    if (low == 0 || cpu->samples[low - 1].native != native) return NULL;
    return &cpu->samples[low - 1];
}

// The native thread's first sample at or after time (one exists: the caller found a later one).
static const eng_cpu_sample *first_sample_from(const eng_cpu *cpu, uint32_t native, int64_t time) {
    size_t low = 0, high = cpu->sample_count;
    while (low < high) {
        size_t mid = low + (high - low) / 2;
        const eng_cpu_sample *s = &cpu->samples[mid];
        if (s->native < native || (s->native == native && s->time < time)) low = mid + 1; else high = mid;
    }
    return &cpu->samples[low];
}

// Two lower bounds of the time a hold [start, end] on native was off a CPU; the larger is taken.
// Inside: between the first and the last tick inside the hold, the wall time less what the CPU
// time grew (the parts before and after count as running). Around: the hold's wall time less
// what the CPU time grew from the last tick before it to the first after it (the thread may have
// run outside the hold too: more CPU, a smaller bound), which also measures a hold shorter than
// the gap between two ticks.
int64_t cpu_time_off(const eng_engine *engine, const eng_interval *interval) {
    const eng_cpu *cpu = &engine->cpu;
    int64_t wall = interval->end - interval->start;
    if (!cpu->tick_count || !interval->has_native || wall <= 0) return 0;
    uint32_t native = interval->native;
    int64_t inside = 0, around = 0;
    size_t first = tick_at_or_after(cpu, interval->start);
    size_t past = tick_at_or_after(cpu, interval->end + 1);  // ticks at or before end: [first, past)
    if (past >= first + 2) {
        int64_t first_tick = cpu->ticks[first], last_tick = cpu->ticks[past - 1];
        const eng_cpu_sample *end = sample_at(cpu, native, last_tick);
        const eng_cpu_sample *begin = sample_at(cpu, native, first_tick);
        if (end && !begin) {  // first listed inside the hold: measured from there
            begin = first_sample_from(cpu, native, first_tick);
            first_tick = begin->time;
        }
        int64_t span = last_tick - first_tick, ran = end && begin ? end->cpu - begin->cpu : span;
        if (span > 0 && ran < span) inside = ran < 0 ? span : span - ran;
    }
    size_t after = tick_at_or_after(cpu, interval->end);
    size_t before_past = tick_at_or_after(cpu, interval->start + 1);  // ticks at or before start: [0, before_past)
    if (before_past > 0 && after < cpu->tick_count) {
        const eng_cpu_sample *begin = sample_at(cpu, native, cpu->ticks[before_past - 1]);
        const eng_cpu_sample *end = sample_at(cpu, native, cpu->ticks[after]);
        if (begin && end && end->cpu - begin->cpu < wall) around = end->cpu < begin->cpu ? wall : wall - (end->cpu - begin->cpu);
    }
    return inside > around ? inside : around;
}
