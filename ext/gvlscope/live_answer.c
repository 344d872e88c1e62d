// The live socket's answer to a snapshot (lib/gvlscope/live/answer.rb): its thread rows written
// as JSON straight from Native.metrics_snapshot's packed rows, their totals, and the answer's
// writing to the client in pieces. With 5,000 threads a row object, a Hash and a String per
// thread made ~46,000 objects an answer, and the collection they brought on marks every thread's
// stack (20-130 ms) while the program waits: here a row costs no Ruby object.
#include "gvlscope.h"
#include "metrics.h"
#include "fibers.h"
#include <ruby/io.h>
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static const char *const state_names[] = GVLS_STATE_NAMES;
#define STATE_COUNT (sizeof(state_names) / sizeof(state_names[0]))
enum { ROW_SERIAL = GVLS_ROW_serial, ROW_RACTOR = GVLS_ROW_ractor_id, ROW_STATE = GVLS_ROW_state,
       ROW_EXITED = GVLS_ROW_exited, ROW_COUNTERS = GVLS_ROW_COUNTERS };
// Live::Snapshot::ThreadRow#to_h's keys after "exited": the packed counters' names (metrics.h; the
// row's "code" comes before io_overlap_wait_ns, as snapshot files have it).
#define COUNTER_KEY(name, how) #name,
static const char *const counter_keys[COUNTER_FIELDS] = { GVLS_THREAD_COUNTERS(COUNTER_KEY) };
// The maxima among the counters (Metrics::MAX_COUNTERS): totals keep the largest, not the sum.
#define MAXIMUM_FLAG(name, how) [GVLS_COUNTER_##name] = IS_MAXIMUM_##how,
enum { IS_MAXIMUM_SUM = 0, IS_MAXIMUM_MAX = 1 };
static const char maximum[COUNTER_FIELDS] = { GVLS_THREAD_COUNTERS(MAXIMUM_FLAG) };
static int is_maximum(int counter) { return maximum[counter]; }

static long row_count(VALUE rows) {
    StringValue(rows);
    return RSTRING_LEN(rows) / (long)(ROW_FIELDS * sizeof(uint64_t));
}

static const uint64_t *row_at(VALUE rows, long index) {
    if (index < 0 || index >= row_count(rows)) rb_raise(rb_eIndexError, "row %ld of %ld", index, row_count(rows));
    return (const uint64_t *)(RSTRING_PTR(rows) + index * (long)(ROW_FIELDS * sizeof(uint64_t)));
}

// Bytes on their way to a Ruby String, gathered in a local block: one rb_str_cat per block, not
// one per field (40 fields a row, 5,000 rows).
typedef struct {
    VALUE buffer;
    size_t length;
    char block[4096];
} json_writer;

static void writer_flush(json_writer *w) {
    rb_str_cat(w->buffer, w->block, (long)w->length);
    w->length = 0;
}

static void put(json_writer *w, const char *bytes, size_t length) {
    while (length > 0) {
        if (w->length == sizeof(w->block)) writer_flush(w);
        size_t room = sizeof(w->block) - w->length, piece = length < room ? length : room;
        memcpy(w->block + w->length, bytes, piece);
        w->length += piece;
        bytes += piece;
        length -= piece;
    }
}

static void put_cstr(json_writer *w, const char *text) { put(w, text, strlen(text)); }

static void put_number(json_writer *w, uint64_t number) {
    char digits[20];
    int at = sizeof(digits);
    do {
        digits[--at] = (char)('0' + number % 10);
        number /= 10;
    } while (number > 0);
    put(w, digits + at, sizeof(digits) - (size_t)at);
}

// A String as the json gem writes it: quotes, backslashes and control characters escaped, the
// rest (valid UTF-8: labels and code locations pass through Printable.text) as it is; nil as null.
static void put_json_string(json_writer *w, VALUE text) {
    if (NIL_P(text)) return put_cstr(w, "null");
    StringValue(text);
    const char *bytes = RSTRING_PTR(text);
    long length = RSTRING_LEN(text), plain = 0;
    put(w, "\"", 1);
    for (long i = 0; i < length; i++) {
        unsigned char c = (unsigned char)bytes[i];
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        put(w, bytes + plain, (size_t)(i - plain));
        plain = i + 1;
        char escape[8];
        switch (c) {
        case '"': put_cstr(w, "\\\""); break;
        case '\\': put_cstr(w, "\\\\"); break;
        case '\b': put_cstr(w, "\\b"); break;
        case '\f': put_cstr(w, "\\f"); break;
        case '\n': put_cstr(w, "\\n"); break;
        case '\r': put_cstr(w, "\\r"); break;
        case '\t': put_cstr(w, "\\t"); break;
        default: snprintf(escape, sizeof(escape), "\\u%04x", c); put_cstr(w, escape);
        }
    }
    put(w, bytes + plain, (size_t)(length - plain));
    put(w, "\"", 1);
}

// The row of +serial+'s event loop in +loops+ (Native.loop_rows, sorted by serial), or NULL:
// a binary search, no object.
static const uint64_t *loop_row_of(VALUE loops, uint64_t serial) {
    const uint64_t *rows = (const uint64_t *)RSTRING_PTR(loops);
    long low = 0, high = RSTRING_LEN(loops) / (long)(GVLS_LOOP_ROW_FIELDS * sizeof(uint64_t));
    while (low < high) {
        long middle = low + (high - low) / 2;
        uint64_t at = rows[middle * GVLS_LOOP_ROW_FIELDS + GVLS_LOOP_ROW_SERIAL];
        if (at == serial) return rows + middle * GVLS_LOOP_ROW_FIELDS;
        if (at < serial) low = middle + 1;
        else high = middle;
    }
    return NULL;
}

// A loop's row as Live::Snapshot::LoopRow#to_h's JSON object (the histogram without trailing zeros).
static void put_loop(json_writer *w, const uint64_t *loop) {
    put_cstr(w, "{\"turns\":");
    put_number(w, loop[GVLS_LOOP_ROW_TURNS]);
    put_cstr(w, ",\"busy_ns\":");
    put_number(w, loop[GVLS_LOOP_ROW_BUSY_NS]);
    put_cstr(w, ",\"longest_turn_ns\":");
    put_number(w, loop[GVLS_LOOP_ROW_LONGEST_NS]);
    put_cstr(w, ",\"turn_histogram\":[");
    const uint64_t *histogram = loop + GVLS_LOOP_ROW_HISTOGRAM;
    int used = GVLS_HISTOGRAM_BUCKETS;
    while (used > 0 && histogram[used - 1] == 0) used--;
    for (int b = 0; b < used; b++) {
        if (b) put(w, ",", 1);
        put_number(w, histogram[b]);
    }
    put_cstr(w, "]}");
}

// Row +index+ as Live::Snapshot::ThreadRow#to_h's JSON object; "loop" only for a thread whose
// event loop gave turns (+loops+: Native.loop_rows).
static void put_row(json_writer *w, VALUE rows, long index, VALUE label, VALUE at, VALUE loops) {
    const uint64_t *row = row_at(rows, index);
    put_cstr(w, "{\"serial\":");
    put_number(w, row[ROW_SERIAL]);
    put_cstr(w, ",\"label\":");
    put_json_string(w, label);
    put_cstr(w, ",\"ractor_id\":");
    put_number(w, row[ROW_RACTOR]);
    put_cstr(w, ",\"state\":");
    if (row[ROW_STATE] < STATE_COUNT) {
        put_cstr(w, "\"");
        put_cstr(w, state_names[row[ROW_STATE]]);
        put_cstr(w, "\"");
    } else {
        put_cstr(w, "null");
    }
    put_cstr(w, row[ROW_EXITED] == 1 ? ",\"exited\":true" : ",\"exited\":false");
    for (int counter = 0; counter < COUNTER_FIELDS; counter++) {
        if (counter == GVLS_COUNTER_io_overlap_wait_ns) {
            put_cstr(w, ",\"code\":");
            if (NIL_P(at)) {
                put_cstr(w, "null");
            } else {
                put_cstr(w, "{\"at\":");
                put_json_string(w, at);
                put_cstr(w, "}");
            }
        }
        put_cstr(w, ",\"");
        put_cstr(w, counter_keys[counter]);
        put_cstr(w, "\":");
        put_number(w, row[ROW_COUNTERS + counter]);
    }
    const uint64_t *loop = loop_row_of(loops, row[ROW_SERIAL]);
    if (loop) {
        put_cstr(w, ",\"loop\":");
        put_loop(w, loop);
    }
    put_cstr(w, "}");
}

// Native.snapshot_rows_json(buffer, rows, first, count, labels, code_at, loops) -> buffer, with rows
// first...first+count of +rows+ appended as Live::Snapshot::ThreadRow#to_h's JSON objects, each
// after a comma when the buffer ends with one ("}"). labels: each row's label (an Array by row
// index; nil: null); code_at: {row index => its code's "at"} (a Hash); loops: Native.loop_rows.
static VALUE snapshot_rows_json(VALUE self, VALUE buffer, VALUE rows, VALUE first, VALUE count, VALUE labels,
                                VALUE code_at, VALUE loops) {
    StringValue(buffer);
    StringValue(loops);
    rb_str_modify(buffer);
    Check_Type(labels, T_ARRAY);
    Check_Type(code_at, T_HASH);
    json_writer w = { .buffer = buffer, .length = 0 };
    long from = NUM2LONG(first), to = from + NUM2LONG(count);
    int after_row = RSTRING_LEN(buffer) > 0 && RSTRING_PTR(buffer)[RSTRING_LEN(buffer) - 1] == '}';
    for (long index = from; index < to; index++) {
        if (index > from || after_row) put(&w, ",", 1);
        put_row(&w, rows, index, rb_ary_entry(labels, index), rb_hash_lookup(code_at, LONG2NUM(index)), loops);
    }
    writer_flush(&w);
    return buffer;
}

// Native.snapshot_rows_summary(rows) -> [totals, held_ns_by_ractor, states, busy_ns]
//   totals: each counter over all rows (the last, exited threads', included) as Metrics::Snapshot
//     sums them (the longest_* their maximum)
//   held_ns_by_ractor: {ractor_id => run_ns + gc_ns} over the live threads' rows (all but the last)
//   states: each live thread's state index (Native::STATES); busy_ns: its run_ns + wait_ns
static VALUE snapshot_rows_summary(VALUE self, VALUE rows) {
    long count = row_count(rows);
    uint64_t totals[COUNTER_FIELDS] = { 0 };
    VALUE by_ractor = rb_hash_new(), states = rb_ary_new_capa(count), busy = rb_ary_new_capa(count);
    for (long i = 0; i < count; i++) {
        const uint64_t *row = row_at(rows, i);
        for (int c = 0; c < COUNTER_FIELDS; c++) {
            uint64_t value = row[ROW_COUNTERS + c];
            totals[c] = is_maximum(c) ? (value > totals[c] ? value : totals[c]) : totals[c] + value;
        }
        if (i == count - 1) break;  // the exited threads' row: no thread, no Ractor of its own
        VALUE ractor = ULL2NUM(row[ROW_RACTOR]);
        VALUE held = rb_hash_lookup2(by_ractor, ractor, INT2FIX(0));
        const uint64_t *counters = row + ROW_COUNTERS;
        uint64_t own = counters[GVLS_COUNTER_run_ns] + counters[GVLS_COUNTER_gc_ns];
        rb_hash_aset(by_ractor, ractor, rb_funcall(held, '+', 1, ULL2NUM(own)));
        rb_ary_push(states, ULL2NUM(row[ROW_STATE]));
        rb_ary_push(busy, ULL2NUM(counters[GVLS_COUNTER_run_ns] + counters[GVLS_COUNTER_wait_ns]));
    }
    VALUE sums = rb_ary_new_capa(COUNTER_FIELDS);
    for (int c = 0; c < COUNTER_FIELDS; c++) rb_ary_push(sums, ULL2NUM(totals[c]));
    return rb_ary_new_from_args(4, sums, by_ractor, states, busy);
}

// Native.send_from(io, string, offset) -> the bytes of +string+ from +offset+ that the socket
// took now, or :wait_writable. An answer of megabytes goes out in the pieces the socket takes
// without a copy of its rest per piece (String#byteslice would make one, or share the buffer
// until a collection frees it). Never blocks, never raises SIGPIPE (a client gone: EPIPE).
static VALUE send_from(VALUE self, VALUE io, VALUE string, VALUE offset) {
    StringValue(string);
    long from = NUM2LONG(offset), length = RSTRING_LEN(string);
    if (from < 0 || from > length) rb_raise(rb_eArgError, "offset %ld outside 0..%ld", from, length);
    int fd = rb_io_descriptor(io);
    int flags = MSG_DONTWAIT;
#ifdef MSG_NOSIGNAL
    flags |= MSG_NOSIGNAL;
#endif
    ssize_t sent = send(fd, RSTRING_PTR(string) + from, (size_t)(length - from), flags);
    if (sent >= 0) return LONG2NUM((long)sent);
    if (errno == EAGAIN || errno == EWOULDBLOCK) return ID2SYM(rb_intern("wait_writable"));
    if (errno == EINTR) return INT2FIX(0);
    rb_sys_fail("send");
    return Qnil;
}

void gvls_live_answer_init(VALUE mNative) {
    rb_define_singleton_method(mNative, "snapshot_rows_json", snapshot_rows_json, 7);
    rb_define_singleton_method(mNative, "snapshot_rows_summary", snapshot_rows_summary, 1);
    rb_define_singleton_method(mNative, "send_from", send_from, 3);
}
