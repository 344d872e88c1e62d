// The live socket's answer to a snapshot (lib/gvlscope/live/answer.rb): its thread rows written
// as JSON straight from Native.metrics_snapshot's packed rows, their totals, and the answer's
// writing to the client in pieces. With 5,000 threads a row object, a Hash and a String per
// thread made ~46,000 objects an answer, and the collection they brought on marks every thread's
// stack (20-130 ms) while the program waits: here a row costs no Ruby object.
#include "gvlscope.h"
#include "metrics.h"
#include <ruby/io.h>
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static const char *const state_names[] = GVLS_STATE_NAMES;
#define STATE_COUNT (sizeof(state_names) / sizeof(state_names[0]))
enum { ROW_SERIAL, ROW_RACTOR, ROW_STATE, ROW_EXITED, ROW_COUNTERS };
enum { RUN_NS, WAIT_NS, IDLE_NS, GC_NS };
// Live::Snapshot::ThreadRow#to_h's keys after "exited", in the packed counters' order (the row's
// "code" comes before the last one, io_overlap_wait_ns).
static const char *const counter_keys[COUNTER_FIELDS] = {
    "run_ns", "wait_ns", "idle_ns", "gc_ns", "holds", "waits", "longest_hold_ns", "longest_wait_ns",
    "released_blocking", "released_preempted", "released_exit", "io_overlap_wait_ns",
};
// The maxima among the counters (Metrics::MAX_COUNTERS): totals keep the largest, not the sum.
static int is_maximum(int counter) { return counter == 6 || counter == 7; }

static long row_count(VALUE rows) {
    StringValue(rows);
    return RSTRING_LEN(rows) / (long)(ROW_FIELDS * sizeof(uint64_t));
}

static const uint64_t *row_at(VALUE rows, long index) {
    if (index < 0 || index >= row_count(rows)) rb_raise(rb_eIndexError, "row %ld of %ld", index, row_count(rows));
    return (const uint64_t *)(RSTRING_PTR(rows) + index * (long)(ROW_FIELDS * sizeof(uint64_t)));
}

static void cat_cstr(VALUE buffer, const char *text) { rb_str_cat(buffer, text, (long)strlen(text)); }

static void cat_number(VALUE buffer, uint64_t number) {
    char digits[24];
    int length = snprintf(digits, sizeof(digits), "%llu", (unsigned long long)number);
    rb_str_cat(buffer, digits, length);
}

// A String as the json gem writes it: quotes, backslashes and control characters escaped, the
// rest (valid UTF-8: labels and code locations pass through Printable.text) as it is; nil as null.
static void cat_json_string(VALUE buffer, VALUE text) {
    if (NIL_P(text)) return cat_cstr(buffer, "null");
    StringValue(text);
    const unsigned char *bytes = (const unsigned char *)RSTRING_PTR(text);
    long length = RSTRING_LEN(text), plain = 0;
    rb_str_cat(buffer, "\"", 1);
    for (long i = 0; i < length; i++) {
        unsigned char c = bytes[i];
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        rb_str_cat(buffer, (const char *)bytes + plain, i - plain);
        plain = i + 1;
        char escape[8];
        switch (c) {
        case '"': cat_cstr(buffer, "\\\""); break;
        case '\\': cat_cstr(buffer, "\\\\"); break;
        case '\b': cat_cstr(buffer, "\\b"); break;
        case '\f': cat_cstr(buffer, "\\f"); break;
        case '\n': cat_cstr(buffer, "\\n"); break;
        case '\r': cat_cstr(buffer, "\\r"); break;
        case '\t': cat_cstr(buffer, "\\t"); break;
        default: snprintf(escape, sizeof(escape), "\\u%04x", c); cat_cstr(buffer, escape);
        }
    }
    rb_str_cat(buffer, (const char *)bytes + plain, length - plain);
    rb_str_cat(buffer, "\"", 1);
}

// Native.snapshot_row_json(buffer, rows, index, label, at) -> buffer, with row +index+ of +rows+
// appended as Live::Snapshot::ThreadRow#to_h's JSON object: +label+ (a String, or nil) its label,
// +at+ (a String, or nil: no code location) its code's "at".
static VALUE snapshot_row_json(VALUE self, VALUE buffer, VALUE rows, VALUE index, VALUE label, VALUE at) {
    const uint64_t *row = row_at(rows, NUM2LONG(index));
    rb_str_modify(buffer);
    cat_cstr(buffer, "{\"serial\":");
    cat_number(buffer, row[ROW_SERIAL]);
    cat_cstr(buffer, ",\"label\":");
    cat_json_string(buffer, label);
    cat_cstr(buffer, ",\"ractor_id\":");
    cat_number(buffer, row[ROW_RACTOR]);
    cat_cstr(buffer, ",\"state\":");
    if (row[ROW_STATE] < STATE_COUNT) {
        cat_cstr(buffer, "\"");
        cat_cstr(buffer, state_names[row[ROW_STATE]]);
        cat_cstr(buffer, "\"");
    } else {
        cat_cstr(buffer, "null");
    }
    cat_cstr(buffer, row[ROW_EXITED] == 1 ? ",\"exited\":true" : ",\"exited\":false");
    for (int counter = 0; counter < COUNTER_FIELDS; counter++) {
        if (counter == COUNTER_FIELDS - 1) {
            cat_cstr(buffer, ",\"code\":");
            if (NIL_P(at)) {
                cat_cstr(buffer, "null");
            } else {
                cat_cstr(buffer, "{\"at\":");
                cat_json_string(buffer, at);
                cat_cstr(buffer, "}");
            }
        }
        cat_cstr(buffer, ",\"");
        cat_cstr(buffer, counter_keys[counter]);
        cat_cstr(buffer, "\":");
        cat_number(buffer, row[ROW_COUNTERS + counter]);
    }
    cat_cstr(buffer, "}");
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
        uint64_t own = row[ROW_COUNTERS + RUN_NS] + row[ROW_COUNTERS + GC_NS];
        rb_hash_aset(by_ractor, ractor, rb_funcall(held, '+', 1, ULL2NUM(own)));
        rb_ary_push(states, ULL2NUM(row[ROW_STATE]));
        rb_ary_push(busy, ULL2NUM(row[ROW_COUNTERS + RUN_NS] + row[ROW_COUNTERS + WAIT_NS]));
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
    rb_define_singleton_method(mNative, "snapshot_row_json", snapshot_row_json, 5);
    rb_define_singleton_method(mNative, "snapshot_rows_summary", snapshot_rows_summary, 1);
    rb_define_singleton_method(mNative, "send_from", send_from, 3);
}
