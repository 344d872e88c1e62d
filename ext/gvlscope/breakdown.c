// GVLScope::Breakdown's series (lib/gvlscope/breakdown.rb): the sums of one route's or job
// class's requests. A request is added in one C call, which holds the GVL from start to end, so
// threads adding at once need no Mutex and a snapshot never sees half an add (in Ruby, a Mutex and
// nine Array updates cost a hello-world request ~14,000 instructions; this call ~200).
#include "gvlscope.h"
#include "histogram.h"
#include <ruby/encoding.h>

enum { COUNT, RUN, WAIT, IDLE, GC, DURATION, PICKUP, SUMS };
#define BUCKETS 64

typedef struct {
    uint64_t sums[SUMS];
    double sample_rate;         // the producer's, as last given
    uint64_t buckets[BUCKETS];  // log2 buckets of each add's GVL wait (ns)
} series;

static size_t series_size(const void *ptr) { return sizeof(series); }

static const rb_data_type_t series_type = {
    .wrap_struct_name = "GVLScope::Native::BreakdownSeries",
    .function = { .dmark = NULL, .dfree = RUBY_TYPED_DEFAULT_FREE, .dsize = series_size },
    .flags = RUBY_TYPED_FREE_IMMEDIATELY | RUBY_TYPED_WB_PROTECTED,
};

static VALUE series_alloc(VALUE klass) {
    series *s;
    VALUE obj = TypedData_Make_Struct(klass, series, &series_type, s);
    s->sample_rate = 1.0;
    return obj;
}

static series *series_of(VALUE self) { return rb_check_typeddata(self, &series_type); }

static void add(series *s, const uint64_t values[6], double sample_rate) {
    s->sums[COUNT] += 1;
    for (int i = 0; i < 6; i++) s->sums[RUN + i] += values[i];
    s->sample_rate = sample_rate;
    unsigned bucket = gvls_log2_bucket(values[1]);
    s->buckets[bucket < BUCKETS ? bucket : BUCKETS - 1] += 1;
}

// series.add(timing, sample_rate) -> true, or false when timing is not a RequestTiming (the Ruby
// side then reads its numbers and calls add_values).
static VALUE series_add(VALUE self, VALUE timing, VALUE sample_rate) {
    uint64_t values[6];
    if (!gvls_request_timing_values(timing, values)) return Qfalse;
    add(series_of(self), values, NUM2DBL(sample_rate));
    return Qtrue;
}

// series.add_values(run_ns, wait_ns, idle_ns, gc_ns, duration_ns, pickup_wait_ns, sample_rate)
static VALUE series_add_values(int argc, VALUE *argv, VALUE self) {
    rb_check_arity(argc, 7, 7);
    uint64_t values[6];
    for (int i = 0; i < 6; i++) values[i] = NUM2ULL(argv[i]);  // converts (and raises) before adding anything
    add(series_of(self), values, NUM2DBL(argv[6]));
    return Qtrue;
}

// [count, run_ns, wait_ns, idle_ns, gc_ns, duration_ns, pickup_wait_ns, sample_rate, *64 buckets]
static VALUE series_to_a(VALUE self) {
    series copy = *series_of(self);  // copied before any allocation: what one moment held
    VALUE out = rb_ary_new_capa(SUMS + 1 + BUCKETS);
    for (int i = 0; i < SUMS; i++) rb_ary_push(out, ULL2NUM(copy.sums[i]));
    rb_ary_push(out, DBL2NUM(copy.sample_rate));
    for (int i = 0; i < BUCKETS; i++) rb_ary_push(out, ULL2NUM(copy.buckets[i]));
    return out;
}

// GVLScope::RouteLabel's path template, in C because it runs for every request to a path with a
// digit (in Ruby, with a Regexp or split/partition/join, it cost such a request 20,000-35,000
// instructions; here a byte loop and one String). A segment's part before its first "." (its
// stem) is an id when it has a digit and is: digits, alone or before a "-" ("42", "42-my-title");
// or holds 3 digits in a row ("INV-2024-001"); or is 8+ hex digits, or a UUID; or is a token of
// 16+ ASCII letters, digits, "_" and "-" with a letter.
static int is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
static int is_hex(unsigned char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
static int is_letter(unsigned char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

static int is_uuid(const unsigned char *p, long n) {
    if (n != 36) return 0;
    for (long i = 0; i < n; i++) {
        int dash = i == 8 || i == 13 || i == 18 || i == 23;
        if (dash ? p[i] != '-' : !is_hex(p[i])) return 0;
    }
    return 1;
}

static int is_id(const unsigned char *p, long n) {
    long digits = 0, run = 0, longest_run = 0, hex = 0, token = 0, letters = 0;
    for (long i = 0; i < n; i++) {
        unsigned char c = p[i];
        if (is_digit(c)) { digits++; run++; if (run > longest_run) longest_run = run; } else run = 0;
        if (is_hex(c)) hex++;
        if (is_letter(c)) letters++;
        if (is_digit(c) || is_letter(c) || c == '_' || c == '-') token++;
    }
    if (digits == 0) return 0;
    long leading = 0;
    while (leading < n && is_digit(p[leading])) leading++;
    if (leading > 0 && (leading == n || p[leading] == '-')) return 1;
    if (longest_run >= 3) return 1;
    if (n >= 8 && hex == n) return 1;
    if (is_uuid(p, n)) return 1;
    return n >= 16 && token == n && letters > 0;
}

// Native.route_template(method, path) -> "GET /users/:id/posts", or nil when the path has no id.
static VALUE route_template(VALUE self, VALUE method, VALUE path) {
    StringValue(method);
    StringValue(path);
    const unsigned char *p = (const unsigned char *)RSTRING_PTR(path);
    long n = RSTRING_LEN(path);
    VALUE out = Qnil;
    long copied = 0;  // bytes of path already in out
    for (long start = 0; start <= n;) {
        long end = start;
        while (end < n && p[end] != '/') end++;
        long stem_end = start;
        while (stem_end < end && p[stem_end] != '.') stem_end++;
        if (stem_end > start && is_id(p + start, stem_end - start)) {
            if (NIL_P(out)) {
                out = rb_str_buf_new(RSTRING_LEN(method) + 1 + n);
                rb_str_buf_append(out, method);
                rb_str_buf_cat(out, " ", 1);
            }
            rb_str_buf_cat(out, (const char *)p + copied, start - copied);
            rb_str_buf_cat(out, ":id", 3);
            copied = stem_end;
        }
        start = end + 1;
    }
    if (NIL_P(out)) return Qnil;
    rb_str_buf_cat(out, (const char *)p + copied, n - copied);
    rb_enc_associate(out, rb_enc_get(path));
    return out;
}

void gvls_breakdown_init(VALUE mNative) {
    rb_define_singleton_method(mNative, "route_template", route_template, 2);
    VALUE cSeries = rb_define_class_under(mNative, "BreakdownSeries", rb_cObject);
    rb_define_alloc_func(cSeries, series_alloc);
    rb_define_method(cSeries, "add", series_add, 2);
    rb_define_method(cSeries, "add_values", series_add_values, -1);
    rb_define_method(cSeries, "to_a", series_to_a, 0);
}
