// The exports' hot loops, byte for byte what lib/gvlscope/formats/{chrome_json,perfetto,speedscope}.rb
// write for each interval (those files write the rest: headers, names, descriptors). They read a
// thread's intervals back from the spill and append to a buffer that is handed over at 1 MB.
#include <stdlib.h>
#include <string.h>

#include "output.h"

#define FLUSH_BYTES (1 << 20)

void eng_out_init(eng_out *out, eng_flush flush, void *context) {
    memset(out, 0, sizeof(*out));
    out->capacity = FLUSH_BYTES + 4096;
    out->data = malloc(out->capacity);
    if (!out->data) abort();
    out->flush = flush;
    out->context = context;
}

int eng_out_flush(eng_out *out) {
    if (out->size == 0) return 0;
    int stop = out->flush(out->context, out->data, out->size);
    out->size = 0;
    return stop;
}

void eng_out_free(eng_out *out) {
    free(out->data);
    out->data = NULL;
}

static void reserve(eng_out *out, size_t bytes) {
    if (out->size + bytes <= out->capacity) return;
    while (out->size + bytes > out->capacity) out->capacity *= 2;
    out->data = realloc(out->data, out->capacity);
    if (!out->data) abort();
}

static inline void put(eng_out *out, const char *bytes, size_t size) {
    if (size == 0) return;
    reserve(out, size);
    memcpy(out->data + out->size, bytes, size);
    out->size += size;
}

#define PUTS(out, literal) put(out, literal, sizeof(literal) - 1)

static inline void put_byte(eng_out *out, uint8_t byte) {
    reserve(out, 1);
    out->data[out->size++] = (char)byte;
}

static const char DIGIT_PAIRS[201] = "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
                                     "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
                                     "8081828384858687888990919293949596979899";

// Decimal digits, two at a time (this runs twice per interval in the JSON exports).
static void put_int(eng_out *out, int64_t value) {
    char digits[24];
    int at = sizeof(digits);
    uint64_t magnitude = value < 0 ? (uint64_t)0 - (uint64_t)value : (uint64_t)value;
    while (magnitude >= 100) {
        unsigned pair = (unsigned)(magnitude % 100) * 2;
        magnitude /= 100;
        digits[--at] = DIGIT_PAIRS[pair + 1];
        digits[--at] = DIGIT_PAIRS[pair];
    }
    if (magnitude >= 10) {
        digits[--at] = DIGIT_PAIRS[magnitude * 2 + 1];
        digits[--at] = DIGIT_PAIRS[magnitude * 2];
    } else {
        digits[--at] = (char)('0' + magnitude);
    }
    if (value < 0) digits[--at] = '-';
    put(out, digits + at, sizeof(digits) - at);
}

// ChromeJSON#append_us: ns as microseconds, up to 3 decimals without trailing zeros (Ruby's
// floored division and modulo): "12", "12.5", "12.345". The zeros carry nothing and are up to 8
// of the ~90 bytes of a slice.
static void put_us(eng_out *out, int64_t ns) {
    int64_t quotient = ns / 1000, fraction = ns % 1000;
    if (fraction < 0) {
        fraction += 1000;
        quotient -= 1;
    }
    put_int(out, quotient);
    if (fraction == 0) return;
    char tail[4] = { '.', (char)('0' + fraction / 100), (char)('0' + fraction / 10 % 10), (char)('0' + fraction % 10) };
    size_t size = fraction % 100 == 0 ? 2 : fraction % 10 == 0 ? 3 : 4;
    put(out, tail, size);
}

static size_t varint_size(uint64_t value) {
    size_t size = 1;
    while (value >= 0x80) {
        value >>= 7;
        size++;
    }
    return size;
}

static void put_varint(eng_out *out, uint64_t value) {
    while (value >= 0x80) {
        put_byte(out, (uint8_t)(value | 0x80));
        value >>= 7;
    }
    put_byte(out, (uint8_t)value);
}

static size_t encode_varint(uint8_t *to, uint64_t value) {
    size_t size = 0;
    while (value >= 0x80) {
        to[size++] = (uint8_t)(value | 0x80);
        value >>= 7;
    }
    to[size++] = (uint8_t)value;
    return size;
}

// ---------------------------------------------------------------- Chrome JSON

typedef struct {
    eng_out *out;
    const eng_vocabulary *words;
    const char *prefix;     // ',\n{"ph":"X","name":"' is per name; pid and tid are fixed per thread
    int64_t pid;
    uint32_t serial;
    int stop;
} chrome_context;

static int chrome_slice(void *data, const eng_interval *interval) {
    chrome_context *context = data;
    eng_out *out = context->out;
    uint8_t name = interval->state == ST_IDLE ? (uint8_t)(ST_COUNT + interval->reason) : interval->state;
    PUTS(out, ",\n{\"ph\":\"X\",\"name\":\"");
    put(out, context->words->names[name], context->words->name_sizes[name]);
    PUTS(out, "\",\"pid\":");
    put_int(out, context->pid);
    PUTS(out, ",\"tid\":");
    put_int(out, context->serial);
    PUTS(out, ",\"ts\":");
    put_us(out, interval->start);
    PUTS(out, ",\"dur\":");
    put_us(out, interval->end - interval->start);
    if (interval->state == ST_RUN && interval->reason) {
        PUTS(out, ",\"args\":{\"released_by\":\"");
        put(out, context->words->reasons[interval->reason], context->words->reason_sizes[interval->reason]);
        PUTS(out, "\"}}");
    } else {
        put_byte(out, '}');
    }
    if (out->size >= FLUSH_BYTES) return eng_out_flush(out);
    return 0;
}

int eng_chrome_slices(eng_engine *engine, uint32_t at, int64_t pid, const eng_vocabulary *words, eng_out *out) {
    eng_thread *thread = THREAD(engine, at);
    chrome_context context = { out, words, NULL, pid, thread->serial, 0 };
    return eng_stream_each(engine, &thread->stream, false, chrome_slice, &context);
}

typedef struct {
    eng_out *out;
    const char *prefix;
    size_t prefix_size;
} native_context;

static int chrome_native(void *data, const eng_interval *interval) {
    native_context *context = data;
    if (interval->state != ST_RUN || !interval->has_native) return 0;
    eng_out *out = context->out;
    PUTS(out, ",\n");
    put(out, context->prefix, context->prefix_size);
    put_int(out, interval->native);
    PUTS(out, ",\"ts\":");
    put_us(out, interval->start);
    PUTS(out, ",\"dur\":");
    put_us(out, interval->end - interval->start);
    put_byte(out, '}');
    if (out->size >= FLUSH_BYTES) return eng_out_flush(out);
    return 0;
}

int eng_chrome_native(eng_engine *engine, uint32_t at, const char *prefix, size_t prefix_size, eng_out *out) {
    native_context context = { out, prefix, prefix_size };
    return eng_stream_each(engine, &THREAD(engine, at)->stream, false, chrome_native, &context);
}

static int chrome_counter(void *data, const eng_interval *entry) {
    native_context *context = data;
    eng_out *out = context->out;
    PUTS(out, ",\n");
    put(out, context->prefix, context->prefix_size);
    put_us(out, entry->start);
    PUTS(out, ",\"args\":{\"threads\":");
    put_int(out, entry->end);
    PUTS(out, "}}");
    if (out->size >= FLUSH_BYTES) return eng_out_flush(out);
    return 0;
}

int eng_chrome_counter(eng_engine *engine, const char *prefix, size_t prefix_size, eng_out *out) {
    native_context context = { out, prefix, prefix_size };
    return eng_stream_each(engine, &engine->counter, true, chrome_counter, &context);
}

// ---------------------------------------------------------------- Perfetto

// Perfetto#slice's two suffixes for a (track, name): everything after a packet's timestamp.
typedef struct {
    uint8_t begin[600], end[32];
    size_t begin_size, end_size;
    uint8_t ready;
} suffixes;

static void make_suffixes(suffixes *made, uint64_t track, const char *name, size_t name_size) {
    uint8_t event[600];
    size_t size = 0;
    if (name_size > 500) name_size = 500; // a display name is far shorter; the buffer is fixed
    event[size++] = 0x48; // EVENT_TYPE
    event[size++] = 1;    // SLICE_BEGIN
    event[size++] = 0x58; // TRACK_UUID
    size += encode_varint(event + size, track);
    event[size++] = 0xba; // EVENT_NAME (23, length-delimited)
    event[size++] = 0x01;
    size += encode_varint(event + size, name_size);
    memcpy(event + size, name, name_size);
    size += name_size;
    made->begin_size = 0;
    made->begin[made->begin_size++] = 0x5a; // TRACK_EVENT
    made->begin_size += encode_varint(made->begin + made->begin_size, size);
    memcpy(made->begin + made->begin_size, event, size);
    made->begin_size += size;
    made->begin[made->begin_size++] = 0x50; // SEQUENCE_ID
    made->begin[made->begin_size++] = 1;
    size = 0;
    event[size++] = 0x48;
    event[size++] = 2; // SLICE_END
    event[size++] = 0x58;
    size += encode_varint(event + size, track);
    made->end_size = 0;
    made->end[made->end_size++] = 0x5a;
    made->end_size += encode_varint(made->end + made->end_size, size);
    memcpy(made->end + made->end_size, event, size);
    made->end_size += size;
    made->end[made->end_size++] = 0x50;
    made->end[made->end_size++] = 1;
    made->ready = 1;
}

static void timed_packet(eng_out *out, int64_t time, const uint8_t *suffix, size_t suffix_size) {
    put_byte(out, 0x0a);
    put_varint(out, 1 + varint_size((uint64_t)time) + suffix_size);
    put_byte(out, 0x40); // TIMESTAMP
    put_varint(out, (uint64_t)time);
    put(out, (const char *)suffix, suffix_size);
}

typedef struct {
    eng_out *out;
    const eng_vocabulary *words;
    uint64_t track;
    suffixes by_name[ST_COUNT + R_COUNT];
    // native lanes: one name (the thread's), a track per native thread
    const char *name;
    size_t name_size;
    uint32_t native;
    suffixes native_suffixes;
} perfetto_context;

static int perfetto_slice(void *data, const eng_interval *interval) {
    perfetto_context *context = data;
    uint8_t name = interval->state == ST_IDLE ? (uint8_t)(ST_COUNT + interval->reason) : interval->state;
    suffixes *made = &context->by_name[name];
    if (!made->ready) make_suffixes(made, context->track, context->words->names[name], context->words->name_sizes[name]);
    timed_packet(context->out, interval->start, made->begin, made->begin_size);
    timed_packet(context->out, interval->end, made->end, made->end_size);
    if (context->out->size >= FLUSH_BYTES) return eng_out_flush(context->out);
    return 0;
}

int eng_perfetto_slices(eng_engine *engine, uint32_t at, uint64_t track, const eng_vocabulary *words, eng_out *out) {
    perfetto_context *context = calloc(1, sizeof(perfetto_context));
    if (!context) abort();
    context->out = out;
    context->words = words;
    context->track = track;
    int status = eng_stream_each(engine, &THREAD(engine, at)->stream, false, perfetto_slice, context);
    free(context);
    return status;
}

static int perfetto_native(void *data, const eng_interval *interval) {
    perfetto_context *context = data;
    if (interval->state != ST_RUN || !interval->has_native) return 0;
    suffixes *made = &context->native_suffixes;
    if (!made->ready || context->native != interval->native) {
        make_suffixes(made, UINT64_C(2000000000) + interval->native, context->name, context->name_size);
        context->native = interval->native;
    }
    timed_packet(context->out, interval->start, made->begin, made->begin_size);
    timed_packet(context->out, interval->end, made->end, made->end_size);
    if (context->out->size >= FLUSH_BYTES) return eng_out_flush(context->out);
    return 0;
}

int eng_perfetto_native(eng_engine *engine, uint32_t at, const char *name, size_t name_size, eng_out *out) {
    perfetto_context *context = calloc(1, sizeof(perfetto_context));
    if (!context) abort();
    context->out = out;
    context->name = name;
    context->name_size = name_size;
    int status = eng_stream_each(engine, &THREAD(engine, at)->stream, false, perfetto_native, context);
    free(context);
    return status;
}

static int perfetto_counter(void *data, const eng_interval *entry) {
    eng_out *out = data;
    uint8_t event[16];
    size_t event_size = 0;
    event[event_size++] = 0x48; // EVENT_TYPE
    event[event_size++] = 4;    // COUNTER
    event[event_size++] = 0x58; // TRACK_UUID
    event[event_size++] = 42;   // Perfetto::COUNTER_UUID
    event[event_size++] = 0xf0; // COUNTER_VALUE (30)
    event[event_size++] = 0x01;
    event_size += encode_varint(event + event_size, (uint64_t)entry->end);
    size_t body = 1 + varint_size((uint64_t)entry->start) + 1 + varint_size(event_size) + event_size + 2;
    put_byte(out, 0x0a);
    put_varint(out, body);
    put_byte(out, 0x40);
    put_varint(out, (uint64_t)entry->start);
    put_byte(out, 0x5a);
    put_varint(out, event_size);
    put(out, (const char *)event, event_size);
    put_byte(out, 0x50);
    put_byte(out, 1);
    if (out->size >= FLUSH_BYTES) return eng_out_flush(out);
    return 0;
}

int eng_perfetto_counter(eng_engine *engine, eng_out *out) {
    return eng_stream_each(engine, &engine->counter, true, perfetto_counter, out);
}

// ---------------------------------------------------------------- speedscope

typedef struct {
    eng_out *out;
    const int64_t *frames; // frame index per name code
    bool first;
} speedscope_context;

static int speedscope_event(void *data, const eng_interval *interval) {
    speedscope_context *context = data;
    if (interval->end == interval->start) return 0; // the exit marker: nothing to draw
    eng_out *out = context->out;
    uint8_t name = interval->state == ST_IDLE ? (uint8_t)(ST_COUNT + interval->reason) : interval->state;
    if (context->first) PUTS(out, "\n"); else PUTS(out, ",\n");
    context->first = false;
    PUTS(out, "{\"type\":\"O\",\"frame\":");
    put_int(out, context->frames[name]);
    PUTS(out, ",\"at\":");
    put_int(out, interval->start);
    PUTS(out, "},{\"type\":\"C\",\"frame\":");
    put_int(out, context->frames[name]);
    PUTS(out, ",\"at\":");
    put_int(out, interval->end);
    put_byte(out, '}');
    if (out->size >= FLUSH_BYTES) return eng_out_flush(out);
    return 0;
}

int eng_speedscope_events(eng_engine *engine, uint32_t at, const int64_t *frames, eng_out *out) {
    speedscope_context context = { out, frames, true };
    return eng_stream_each(engine, &THREAD(engine, at)->stream, false, speedscope_event, &context);
}

// ---------------------------------------------------------------- Firefox Profiler

// ns as milliseconds, up to 6 decimals without trailing zeros (the Firefox Profiler's times):
// "12", "12.5", "0.000123", "-0.5".
static void put_ms(eng_out *out, int64_t ns) {
    uint64_t magnitude = ns < 0 ? (uint64_t)0 - (uint64_t)ns : (uint64_t)ns;
    if (ns < 0) put_byte(out, '-');
    uint64_t fraction = magnitude % 1000000;
    put_int(out, (int64_t)(magnitude / 1000000));
    if (fraction == 0) return;
    char tail[7] = { '.' };
    uint64_t rest = fraction;
    for (int digit = 6; digit >= 1; digit--) {
        tail[digit] = (char)('0' + rest % 10);
        rest /= 10;
    }
    size_t size = 7;
    while (tail[size - 1] == '0') size--;
    put(out, tail, size);
}

typedef struct {
    eng_out *out;
    int column;
    const char *const *texts;
    const size_t *sizes;
    uint64_t count;
} firefox_context;

// An interval's key in the texts of a column: its name code, or for a run interval with a
// release cause FIREFOX_KEYS - R_COUNT + the cause (its marker carries the cause).
static unsigned firefox_key(const eng_interval *interval) {
    if (interval->state == ST_RUN && interval->reason) return ST_COUNT + R_COUNT + interval->reason;
    return interval->state == ST_IDLE ? (unsigned)(ST_COUNT + interval->reason) : interval->state;
}

static int firefox_value(void *data, const eng_interval *interval) {
    firefox_context *context = data;
    eng_out *out = context->out;
    if (context->count++) put_byte(out, ',');
    switch (context->column) {
    case ENG_FIREFOX_START:
        put_ms(out, interval->start);
        break;
    case ENG_FIREFOX_END:
        // The exit marker is an instant: no end.
        if (interval->state == ST_EXITED) PUTS(out, "null");
        else put_ms(out, interval->end);
        break;
    default: {
        unsigned key = firefox_key(interval);
        put(out, context->texts[key], context->sizes[key]);
    }
    }
    if (out->size >= FLUSH_BYTES) return eng_out_flush(out);
    return 0;
}

int eng_firefox_column(eng_engine *engine, uint32_t at, int column, const char *const *texts, const size_t *sizes,
                       eng_out *out, uint64_t *count) {
    firefox_context context = { out, column, texts, sizes, 0 };
    int status = eng_stream_each(engine, &THREAD(engine, at)->stream, false, firefox_value, &context);
    *count = context.count;
    return status;
}
