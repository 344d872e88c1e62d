// The exports' per-interval writers (output.c).
#ifndef GVLSCOPE_ENGINE_OUTPUT_H
#define GVLSCOPE_ENGINE_OUTPUT_H

#include "pass_shared.h"

// Hands a full buffer over (to a Ruby block); non-zero stops the writer.
typedef int (*eng_flush)(void *context, const char *data, size_t size);

typedef struct {
    char *data;
    size_t size, capacity;
    eng_flush flush;
    void *context;
} eng_out;

// The words of the outputs, by name code (a state, or ST_COUNT + reason for an idle interval:
// Vocabulary.slice_name) and by reason code.
typedef struct {
    const char *names[ST_COUNT + R_COUNT];
    size_t name_sizes[ST_COUNT + R_COUNT];
    const char *reasons[R_COUNT];
    size_t reason_sizes[R_COUNT];
} eng_vocabulary;

void eng_out_init(eng_out *out, eng_flush flush, void *context);
int eng_out_flush(eng_out *out);
void eng_out_free(eng_out *out);

int eng_chrome_slices(eng_engine *engine, uint32_t at, int64_t pid, const eng_vocabulary *words, eng_out *out);
int eng_chrome_native(eng_engine *engine, uint32_t at, const char *prefix, size_t prefix_size, eng_out *out);
int eng_chrome_counter(eng_engine *engine, const char *prefix, size_t prefix_size, eng_out *out);
int eng_perfetto_slices(eng_engine *engine, uint32_t at, uint64_t track, const eng_vocabulary *words, eng_out *out);
int eng_perfetto_native(eng_engine *engine, uint32_t at, const char *name, size_t name_size, eng_out *out);
int eng_perfetto_counter(eng_engine *engine, eng_out *out);
int eng_speedscope_events(eng_engine *engine, uint32_t at, const int64_t *frames, eng_out *out);

// The Firefox Profiler's marker table, a column at a time (formats/firefox.rb): each interval's
// start or end in ms, or a text by the interval's key (its name code; a run interval with a
// release cause: ST_COUNT + R_COUNT + the cause). +count+: the values written.
enum { ENG_FIREFOX_START = 0, ENG_FIREFOX_END = 1, ENG_FIREFOX_TEXT = 2 };
#define ENG_FIREFOX_KEYS (ST_COUNT + 2 * R_COUNT)
int eng_firefox_column(eng_engine *engine, uint32_t at, int column, const char *const *texts, const size_t *sizes,
                       eng_out *out, uint64_t *count);

#endif
