// GVLScope::Breakdown's series (lib/gvlscope/breakdown.rb): the sums of one route's or job
// class's requests. A request is added in one C call, which holds the GVL from start to end, so
// threads adding at once need no Mutex and a snapshot never sees half an add (in Ruby, a Mutex and
// nine Array updates cost a hello-world request ~14,000 instructions; this call ~200).
#include "gvlscope.h"
#include "histogram.h"

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

void gvls_breakdown_init(VALUE mNative) {
    VALUE cSeries = rb_define_class_under(mNative, "BreakdownSeries", rb_cObject);
    rb_define_alloc_func(cSeries, series_alloc);
    rb_define_method(cSeries, "add", series_add, 2);
    rb_define_method(cSeries, "add_values", series_add_values, -1);
    rb_define_method(cSeries, "to_a", series_to_a, 0);
}
