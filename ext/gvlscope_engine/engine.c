// GVLScope::Engine: the report engine's Ruby face (lib/gvlscope/model/scan.rb drives it).
//   Engine::Index  pass 1 over a trace's records (index.c)
//   Engine::Pass   one pass of the state machine and its consumers (pass.c and the files it
//                  lists), its results, and the exports' per-interval writers (output.c)
// Ruby calls #step between chunks of work (a progress bar, Ctrl-C) and reads results at the end.
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ruby.h>
#include <ruby/encoding.h>

#include "output.h"

static VALUE cIndex, cPass;
static eng_vocabulary vocabulary;

// ---------------------------------------------------------------- Index

typedef struct {
    eng_index index;
    bool open;
} index_box;

static void index_free(void *data) {
    index_box *box = data;
    if (box->open) eng_index_free(&box->index);
    xfree(box);
}

static size_t index_size(const void *data) {
    const index_box *box = data;
    return sizeof(*box) + box->index.memory.current;
}

static const rb_data_type_t index_type = {
    "GVLScope::Engine::Index", { NULL, index_free, index_size, }, 0, 0, RUBY_TYPED_FREE_IMMEDIATELY,
};

static index_box *get_index(VALUE self) {
    index_box *box;
    TypedData_Get_Struct(self, index_box, &index_type, box);
    if (!box->open) rb_raise(rb_eRuntimeError, "engine index not open");
    return box;
}

// Index.open(path, args, chunks): args: ARG records carry values (stacks, or version 4); chunks packed "Q<Q<Q<" per events chunk, in file order:
// offset of its records, base_ns, count | native serial << 32.
static VALUE index_open(VALUE klass, VALUE path, VALUE args, VALUE chunks) {
    StringValue(chunks);
    FilePathValue(path);
    index_box *box;
    VALUE self = TypedData_Make_Struct(klass, index_box, &index_type, box);
    size_t count = (size_t)RSTRING_LEN(chunks) / 24;
    uint64_t *packed = ALLOC_N(uint64_t, count * 3 + 1);
    memcpy(packed, RSTRING_PTR(chunks), count * 24);
    int status = eng_index_open(&box->index, StringValueCStr(path), RTEST(args), packed, count);
    xfree(packed);
    box->open = true;
    if (status) rb_syserr_fail_str(-status, path);
    return self;
}

// Index.imported(times "q<*", kinds "C*", serials "L<*"): events already in time order.
static VALUE index_imported(VALUE klass, VALUE times, VALUE kinds, VALUE serials) {
    StringValue(times);
    StringValue(kinds);
    StringValue(serials);
    size_t count = (size_t)RSTRING_LEN(kinds);
    if ((size_t)RSTRING_LEN(times) != count * 8 || (size_t)RSTRING_LEN(serials) != count * 4) {
        rb_raise(rb_eArgError, "times, kinds and serials differ in length");
    }
    index_box *box;
    VALUE self = TypedData_Make_Struct(klass, index_box, &index_type, box);
    int64_t *time_values = ALLOC_N(int64_t, count + 1);
    uint32_t *serial_values = ALLOC_N(uint32_t, count + 1);
    memcpy(time_values, RSTRING_PTR(times), count * 8);
    memcpy(serial_values, RSTRING_PTR(serials), count * 4);
    eng_index_imported(&box->index, time_values, (const uint8_t *)RSTRING_PTR(kinds), serial_values, count);
    xfree(time_values);
    xfree(serial_values);
    box->open = true;
    return self;
}

static VALUE index_step(VALUE self, VALUE budget) {
    index_box *box = get_index(self);
    bool done;
    int status = eng_index_step(&box->index, NUM2ULL(budget), &done);
    if (status) rb_syserr_fail(-status, "reading the trace");
    return done ? Qtrue : Qfalse;
}

static VALUE index_bytes_done(VALUE self) { return ULL2NUM(get_index(self)->index.bytes_done); }

static int compare_firsts(const void *a, const void *b) {
    const eng_first *x = a, *y = b;
    if (x->first_time != y->first_time) return x->first_time < y->first_time ? -1 : 1;
    if (x->first_index != y->first_index) return x->first_index < y->first_index ? -1 : 1;
    return 0;
}

// { events:, stack_records:, last_time: (nil without events), bad_kind: [kind, byte] or nil }
static VALUE index_summary(VALUE self) {
    eng_index *index = &get_index(self)->index;
    VALUE summary = rb_hash_new();
    rb_hash_aset(summary, ID2SYM(rb_intern("events")), ULL2NUM(index->events));
    rb_hash_aset(summary, ID2SYM(rb_intern("stack_records")), ULL2NUM(index->stack_records));
    rb_hash_aset(summary, ID2SYM(rb_intern("last_time")), index->has_events ? LL2NUM(index->max_time) : Qnil);
    rb_hash_aset(summary, ID2SYM(rb_intern("bad_kind")),
                 index->bad ? rb_ary_new_from_args(2, UINT2NUM(index->bad_kind), ULL2NUM(index->bad_byte)) : Qnil);
    return summary;
}

// The serials of the threads seen in events, in order of their first event.
static VALUE index_serials(VALUE self) {
    eng_index *index = &get_index(self)->index;
    size_t count = index->firsts.size;
    eng_first *sorted = ALLOC_N(eng_first, count + 1);
    if (count) memcpy(sorted, index->firsts.data, count * sizeof(eng_first));
    if (count > 1) qsort(sorted, count, sizeof(eng_first), compare_firsts);
    VALUE serials = rb_ary_new_capa((long)count);
    for (size_t i = 0; i < count; i++) rb_ary_push(serials, UINT2NUM(sorted[i].serial));
    xfree(sorted);
    return serials;
}

static int compare_turn_records(const void *a, const void *b) {
    const eng_turn_record *x = a, *y = b;
    if (x->time != y->time) return x->time < y->time ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

// The event loops' turn records (version 4), in (time, file order): "q<L<L<L<" each (time, thread
// serial, kind, value: the fiber's serial after TURN_BEGIN, the stack id after TURN_SITE, else 0).
static VALUE index_turns(VALUE self) {
    eng_index *index = &get_index(self)->index;
    size_t count = index->turns.size;
    eng_turn_record *sorted = ALLOC_N(eng_turn_record, count + 1);
    if (count) memcpy(sorted, index->turns.data, count * sizeof(eng_turn_record));
    if (count > 1) qsort(sorted, count, sizeof(eng_turn_record), compare_turn_records);
    VALUE packed = rb_str_buf_new((long)count * 20);
    for (size_t i = 0; i < count; i++) {
        struct __attribute__((packed)) { int64_t time; uint32_t serial, kind, arg; } row = {
            sorted[i].time, sorted[i].serial, sorted[i].kind, sorted[i].arg };
        rb_str_buf_cat(packed, (const char *)&row, sizeof(row));
    }
    xfree(sorted);
    return packed;
}

static VALUE index_memory(VALUE self) {
    eng_index *index = &get_index(self)->index;
    return rb_ary_new_from_args(2, SIZET2NUM(index->memory.current), SIZET2NUM(index->memory.peak));
}

// ---------------------------------------------------------------- Pass

typedef struct {
    eng_engine *engine;
    VALUE index;
} pass_box;

static void pass_mark(void *data) { rb_gc_mark(((pass_box *)data)->index); }

static void pass_free(void *data) {
    pass_box *box = data;
    if (box->engine) eng_pass_free(box->engine);
    xfree(box);
}

static size_t pass_size(const void *data) {
    const pass_box *box = data;
    return sizeof(*box) + (box->engine ? box->engine->memory.current : 0);
}

static const rb_data_type_t pass_type = {
    "GVLScope::Engine::Pass", { pass_mark, pass_free, pass_size, }, 0, 0, RUBY_TYPED_FREE_IMMEDIATELY,
};

static eng_engine *get_engine(VALUE self) {
    pass_box *box;
    TypedData_Get_Struct(self, pass_box, &pass_type, box);
    if (!box->engine) rb_raise(rb_eRuntimeError, "engine pass not initialised");
    return box->engine;
}

static VALUE option(VALUE options, const char *name) { return rb_hash_aref(options, ID2SYM(rb_intern(name))); }

// Pass.new(index, options): timeslice_ns:, duration_ns:, stack_causes: (a byte per stack id, 0:
// none), cpu_ticks: ("q<" per CPU chunk) and cpu_samples: ("Q<Q<Q<" native serial, time, CPU ns
// per record: cpu_time.c), threads: ("L<L<" serial, Ractor id), bins:, blame:, code:, spill:, spill_dir:,
// windows: [[start, end, limit], ...], windows_only:, median_budget: (values medians keep exactly),
// stats: (false: no rows, histograms nor release sites: an export's pass)
static VALUE pass_new(VALUE klass, VALUE index, VALUE options) {
    index_box *ibox = get_index(index);
    Check_Type(options, T_HASH);
    pass_box *box;
    VALUE self = TypedData_Make_Struct(klass, pass_box, &pass_type, box);
    box->index = index;
    eng_engine *engine = box->engine = eng_pass_new(&ibox->index);
    engine->timeslice_ns = NUM2LL(option(options, "timeslice_ns"));
    engine->duration_ns = NUM2LL(option(options, "duration_ns"));
    VALUE causes = option(options, "stack_causes");
    if (!NIL_P(causes)) {
        StringValue(causes);
        engine->stack_limit = (size_t)RSTRING_LEN(causes);
        engine->stack_causes = eng_alloc(&engine->memory, engine->stack_limit);
        memcpy(engine->stack_causes, RSTRING_PTR(causes), engine->stack_limit);
    }
    VALUE cpu_ticks = option(options, "cpu_ticks"), cpu_samples = option(options, "cpu_samples");
    if (!NIL_P(cpu_ticks) && !NIL_P(cpu_samples)) {
        StringValue(cpu_ticks);
        StringValue(cpu_samples);
        cpu_time_load(engine, RSTRING_PTR(cpu_ticks), (size_t)RSTRING_LEN(cpu_ticks), RSTRING_PTR(cpu_samples),
                      (size_t)RSTRING_LEN(cpu_samples));
    }
    VALUE threads = option(options, "threads");
    if (!NIL_P(threads)) {
        StringValue(threads);
        const uint32_t *pairs = (const uint32_t *)RSTRING_PTR(threads);
        for (long i = 0; i + 1 < RSTRING_LEN(threads) / 4; i += 2) {
            uint32_t serial, ractor;
            memcpy(&serial, pairs + i, 4);
            memcpy(&ractor, pairs + i + 1, 4);
            eng_pass_configure_thread(engine, serial, ractor);
        }
    }
    VALUE bins = option(options, "bins");
    engine->bins = NIL_P(bins) ? 0 : NUM2UINT(bins);
    engine->blame = RTEST(option(options, "blame"));
    engine->code = RTEST(option(options, "code"));
    engine->spill = RTEST(option(options, "spill"));
    engine->windows_only = RTEST(option(options, "windows_only"));
    if (option(options, "stats") == Qfalse) engine->stats = false;
    VALUE budget = option(options, "median_budget");
    if (!NIL_P(budget)) engine->median_budget = NUM2SIZET(budget);
    VALUE dir = option(options, "spill_dir");
    if (!NIL_P(dir)) engine->spill_dir = strdup(StringValueCStr(dir));
    VALUE windows = option(options, "windows");
    if (!NIL_P(windows)) {
        Check_Type(windows, T_ARRAY);
        for (long i = 0; i < RARRAY_LEN(windows); i++) {
            VALUE window = rb_ary_entry(windows, i);
            eng_pass_add_window(engine, NUM2LL(rb_ary_entry(window, 0)), NUM2LL(rb_ary_entry(window, 1)),
                                NUM2ULL(rb_ary_entry(window, 2)));
        }
    }
    return self;
}

static VALUE pass_step(VALUE self, VALUE budget) {
    eng_engine *engine = get_engine(self);
    bool done;
    int status = eng_pass_step(engine, NUM2ULL(budget), &done);
    if (status) rb_syserr_fail(-status, "reading the trace");
    return done ? Qtrue : Qfalse;
}

static VALUE pass_bytes_done(VALUE self) { return ULL2NUM(get_engine(self)->bytes_done); }

static VALUE span(bool has, const int64_t *pair) {
    return has ? rb_ary_new_from_args(2, LL2NUM(pair[0]), LL2NUM(pair[1])) : Qnil;
}

static VALUE counts(const uint64_t *values, size_t size) {
    VALUE array = rb_ary_new_capa((long)size);
    for (size_t i = 0; i < size; i++) rb_ary_push(array, ULL2NUM(values[i]));
    return array;
}

// Per thread, in order of first appearance: [serial, ractor_id, run_ns, wait_ns, idle_ns, gc_ns,
// holds, waits, longest_wait_ns, released_by ([reason code, count] in order of first release), longest_run, longest_wait,
// blocking_waits, slow_blocking_waits, blocking_wait_ns, median_slow_blocking_wait_ns,
// longest_slow_blocking_wait, median_wait_ns, first_wait, first_after_blocking, first_gc,
// during_gc_ns, drawn, longest_gc, long_streaks, long_streak_held_ns, longest_streak, longest_streak_held_ns,
// idle_by_reason ([reason code, ns] for reasons with idle time), io_overlap_wait_ns, held_off_cpu_ns,
// long_streak_off_cpu_ns, longest_streak_off_cpu_ns]
static VALUE pass_threads(VALUE self) {
    eng_engine *engine = get_engine(self);
    VALUE rows = rb_ary_new_capa((long)engine->order.size);
    for (size_t i = 0; i < engine->order.size; i++) {
        uint32_t at = VEC_AT(engine->order, uint32_t, i);
        eng_thread *thread = THREAD(engine, at);
        VALUE row = rb_ary_new_capa(33);
        rb_ary_push(row, UINT2NUM(thread->serial));
        rb_ary_push(row, UINT2NUM(RACTOR(engine, thread->ractor)->id));
        rb_ary_push(row, LL2NUM(thread->totals[ST_RUN]));
        rb_ary_push(row, LL2NUM(thread->totals[ST_WAIT]));
        rb_ary_push(row, LL2NUM(thread->totals[ST_IDLE]));
        rb_ary_push(row, LL2NUM(thread->totals[ST_GC]));
        rb_ary_push(row, ULL2NUM(thread->holds));
        rb_ary_push(row, ULL2NUM(thread->waits));
        rb_ary_push(row, LL2NUM(thread->has_longest_wait ? thread->longest_wait[1] - thread->longest_wait[0] : 0));
        VALUE released = rb_ary_new_capa(thread->release_kinds);
        for (uint8_t k = 0; k < thread->release_kinds; k++) {
            uint8_t reason = thread->release_order[k];
            rb_ary_push(released, rb_ary_new_from_args(2, INT2FIX(reason), ULL2NUM(thread->released[reason])));
        }
        rb_ary_push(row, released);
        rb_ary_push(row, span(thread->has_longest_run, thread->longest_run));
        rb_ary_push(row, span(thread->has_longest_wait, thread->longest_wait));
        rb_ary_push(row, ULL2NUM(thread->blocking_waits));
        rb_ary_push(row, ULL2NUM(thread->slow_blocking_waits));
        rb_ary_push(row, LL2NUM(thread->blocking_wait_ns));
        rb_ary_push(row, LL2NUM(eng_median_value(&thread->slow_median)));
        rb_ary_push(row, span(thread->has_longest_slow, thread->longest_slow));
        rb_ary_push(row, LL2NUM(eng_median_value(&thread->wait_median)));
        rb_ary_push(row, thread->has_first_wait ? LL2NUM(thread->first_wait) : Qnil);
        rb_ary_push(row, thread->has_first_after_blocking ? LL2NUM(thread->first_after_blocking) : Qnil);
        rb_ary_push(row, thread->has_first_gc ? LL2NUM(thread->first_gc) : Qnil);
        rb_ary_push(row, LL2NUM(thread->during_gc));
        rb_ary_push(row, thread->drawn ? Qtrue : Qfalse);
        rb_ary_push(row, span(thread->has_longest_gc, thread->longest_gc));
        rb_ary_push(row, ULL2NUM(thread->long_streaks));
        rb_ary_push(row, LL2NUM(thread->long_streak_held));
        rb_ary_push(row, span(thread->has_longest_streak, thread->longest_streak));
        rb_ary_push(row, LL2NUM(thread->longest_streak_held));
        VALUE idle_by_reason = rb_ary_new();
        for (uint8_t reason = 0; reason < R_COUNT; reason++) {
            if (thread->idle_by_reason[reason] > 0) {
                rb_ary_push(idle_by_reason, rb_ary_new_from_args(2, INT2FIX(reason), LL2NUM(thread->idle_by_reason[reason])));
            }
        }
        rb_ary_push(row, idle_by_reason);
        rb_ary_push(row, LL2NUM(thread->overlap_counted));
        rb_ary_push(row, LL2NUM(thread->held_off));
        rb_ary_push(row, LL2NUM(thread->long_streak_off));
        rb_ary_push(row, LL2NUM(thread->longest_streak_off));
        rb_ary_push(rows, row);
    }
    return rows;
}

// [hold_ns counts, wait_ns counts] summed over the threads with these serials (all when nil).
static VALUE pass_histograms(VALUE self, VALUE serials) {
    eng_engine *engine = get_engine(self);
    uint64_t holds[LOG2_BUCKETS] = { 0 }, waits[LOG2_BUCKETS] = { 0 };
    for (size_t at = 0; at < engine->threads.size; at++) {
        eng_thread *thread = THREAD(engine, at);
        if (!NIL_P(serials) && !RTEST(rb_hash_lookup2(serials, UINT2NUM(thread->serial), Qfalse))) continue;
        for (int b = 0; b < LOG2_BUCKETS; b++) {
            holds[b] += thread->hold_histogram[b];
            waits[b] += thread->wait_histogram[b];
        }
    }
    return rb_ary_new_from_args(2, counts(holds, LOG2_BUCKETS), counts(waits, LOG2_BUCKETS));
}

static VALUE pass_waiters_at_acquire(VALUE self) {
    return counts(get_engine(self)->waiters_at_acquire, LOG2_BUCKETS);
}

static VALUE pass_all_waits_median(VALUE self) { return LL2NUM(eng_median_value(&get_engine(self)->all_waits)); }

static VALUE serial_of(eng_engine *engine, uint32_t at) { return UINT2NUM(THREAD(engine, at)->serial); }

// [[waiter serial, holder serial (nil: the hand-off), all_ns or nil, all_seq, after_blocking_ns or nil, its seq]]
static VALUE pass_blame(VALUE self) {
    eng_engine *engine = get_engine(self);
    VALUE rows = rb_ary_new_capa((long)engine->pairs.size);
    for (size_t i = 0; i < engine->pairs.size; i++) {
        eng_pair *entry = &VEC_AT(engine->pairs, eng_pair, i);
        rb_ary_push(rows, rb_ary_new_from_args(
                              6, serial_of(engine, entry->a), entry->b ? serial_of(engine, entry->b - 1) : Qnil,
                              entry->has_all ? LL2NUM(entry->all_ns) : Qnil, ULL2NUM(entry->all_seq),
                              entry->has_after_blocking ? LL2NUM(entry->after_blocking_ns) : Qnil,
                              ULL2NUM(entry->after_blocking_seq)));
    }
    return rows;
}

// Samples as a flat Array: time, holder serial, stack id, waiters, ... in time order.
static VALUE flat_samples(eng_engine *engine, const eng_vec *samples) {
    VALUE flat = rb_ary_new_capa((long)samples->size * 4);
    for (size_t i = 0; i < samples->size; i++) {
        eng_sample *sample = &VEC_AT(*samples, eng_sample, i);
        rb_ary_push(flat, LL2NUM(sample->time));
        rb_ary_push(flat, UINT2NUM(THREAD(engine, sample->thread)->serial));
        rb_ary_push(flat, UINT2NUM(sample->stack));
        rb_ary_push(flat, LL2NUM(sample->waiters));
    }
    return flat;
}

static VALUE pass_samples(VALUE self) { eng_engine *engine = get_engine(self); return flat_samples(engine, &engine->samples); }
// Those no thread waited for (an event loop's long turn), the same way.
static VALUE pass_lone_samples(VALUE self) { eng_engine *engine = get_engine(self); return flat_samples(engine, &engine->lone_samples); }

static VALUE pass_sample_count(VALUE self) { return SIZET2NUM(get_engine(self)->samples.size); }

// Code locations: [[thread serial (nil for all holders), stack id, weight, count, seq]] in the
// order of kind: :holders (per holder), :stacks (all holders), :waiters (samples during waits).
static VALUE pass_code(VALUE self, VALUE kind) {
    eng_engine *engine = get_engine(self);
    ID id = SYM2ID(kind);
    eng_vec *pairs = id == rb_intern("holders") ? &engine->holder_stacks
                     : id == rb_intern("stacks") ? &engine->stacks_sampled
                                                 : &engine->waiter_stacks;
    VALUE rows = rb_ary_new_capa((long)pairs->size);
    for (size_t i = 0; i < pairs->size; i++) {
        eng_pair *entry = &VEC_AT(*pairs, eng_pair, i);
        VALUE thread = pairs == &engine->stacks_sampled ? Qnil : serial_of(engine, entry->a);
        rb_ary_push(rows, rb_ary_new_from_args(5, thread, UINT2NUM(entry->b), LL2NUM(entry->all_ns),
                                               ULL2NUM(entry->count), ULL2NUM(entry->all_seq)));
    }
    return rows;
}

// Release sites: [[thread serial, site stack id, reason code, ns waited after, releases]], each
// thread's in order of first release.
static VALUE pass_release_sites(VALUE self) {
    eng_engine *engine = get_engine(self);
    VALUE rows = rb_ary_new_capa((long)engine->sites.size);
    for (size_t i = 0; i < engine->sites.size; i++) {
        eng_pair *entry = &VEC_AT(engine->sites, eng_pair, i);
        rb_ary_push(rows, rb_ary_new_from_args(5, serial_of(engine, entry->a), UINT2NUM(entry->b),
                                               UINT2NUM(entry->reason), LL2NUM(entry->all_ns), ULL2NUM(entry->count)));
    }
    return rows;
}

// { serial => [bins * 4 Integers] } for the threads with time in run, wait, idle or gc.
static VALUE pass_overview(VALUE self) {
    eng_engine *engine = get_engine(self);
    VALUE lanes = rb_hash_new();
    for (size_t i = 0; i < engine->order.size; i++) {
        eng_thread *thread = THREAD(engine, VEC_AT(engine->order, uint32_t, i));
        if (!thread->bins) continue;
        VALUE lane = rb_ary_new_capa((long)engine->bins * 4);
        for (int64_t bin = 0; bin < engine->bins; bin++) {
            bool inside = bin >= thread->bin_low && bin < thread->bin_low + thread->bin_count;
            for (int state = 0; state < 4; state++) {
                rb_ary_push(lane, inside ? LL2NUM(thread->bins[(bin - thread->bin_low) * 4 + state]) : INT2FIX(0));
            }
        }
        rb_hash_aset(lanes, UINT2NUM(thread->serial), lane);
    }
    return lanes;
}

// Per window: [[thread serial, state code, reason code, start, end, native or nil, site, index in its thread], ...]
static VALUE pass_windows(VALUE self) {
    eng_engine *engine = get_engine(self);
    VALUE windows = rb_ary_new_capa((long)engine->window_count);
    for (size_t w = 0; w < engine->window_count; w++) {
        eng_vec *found = &engine->windows[w].found;
        VALUE list = rb_ary_new_capa((long)found->size);
        for (size_t i = 0; i < found->size; i++) {
            eng_found *entry = &VEC_AT(*found, eng_found, i);
            eng_interval *interval = &entry->interval;
            VALUE values[8] = { serial_of(engine, interval->thread), INT2FIX(interval->state), INT2FIX(interval->reason),
                                LL2NUM(interval->start), LL2NUM(interval->end),
                                interval->has_native ? UINT2NUM(interval->native) : Qnil, UINT2NUM(interval->site),
                                ULL2NUM(entry->listed) };
            rb_ary_push(list, rb_ary_new_from_values(8, values));
        }
        rb_ary_push(windows, list);
    }
    return windows;
}

// Per window, its intervals as columns: [serials, state codes, reason codes, starts, ends], five
// Arrays of Integers (no object per interval: the HTML report's windows hold up to its whole
// budget). Each window's intervals are freed as its columns are made: a second call finds none.
static VALUE pass_window_columns(VALUE self) {
    eng_engine *engine = get_engine(self);
    VALUE windows = rb_ary_new_capa((long)engine->window_count);
    for (size_t w = 0; w < engine->window_count; w++) {
        eng_vec *found = &engine->windows[w].found;
        long size = (long)found->size;
        VALUE serials = rb_ary_new_capa(size), states = rb_ary_new_capa(size), reasons = rb_ary_new_capa(size),
              starts = rb_ary_new_capa(size), ends = rb_ary_new_capa(size);
        for (size_t i = 0; i < found->size; i++) {
            eng_interval *interval = &VEC_AT(*found, eng_found, i).interval;
            rb_ary_push(serials, serial_of(engine, interval->thread));
            rb_ary_push(states, INT2FIX(interval->state));
            rb_ary_push(reasons, INT2FIX(interval->reason));
            rb_ary_push(starts, LL2NUM(interval->start));
            rb_ary_push(ends, LL2NUM(interval->end));
        }
        vec_free(&engine->memory, found);
        rb_ary_push(windows, rb_ary_new_from_args(5, serials, states, reasons, starts, ends));
    }
    return windows;
}

static VALUE pass_shared_natives(VALUE self) { return get_engine(self)->shared_natives ? Qtrue : Qfalse; }
static VALUE pass_counter_entries(VALUE self) { return ULL2NUM(get_engine(self)->counter_entries); }

static VALUE pass_memory(VALUE self) {
    eng_engine *engine = get_engine(self);
    return rb_ary_new_from_args(3, SIZET2NUM(engine->memory.current), SIZET2NUM(engine->memory.peak),
                                ULL2NUM(engine->spill_size));
}

// ---------------------------------------------------------------- exports

typedef struct {
    VALUE chunk; // one String, refilled for each piece: the block writes it before the next
    int state;   // a Ruby exception from the block
    int fd;      // or straight to this file descriptor (no String at all)
} yield_context;

static int flush_to_fd(void *data, const char *bytes, size_t size) {
    yield_context *context = data;
    size_t done = 0;
    while (done < size) {
        ssize_t wrote = write(context->fd, bytes + done, size - done);
        if (wrote < 0) {
            if (errno == EINTR) continue;
            return -errno;
        }
        done += (size_t)wrote;
    }
    return 0;
}

static VALUE yield_chunk(VALUE chunk) { return rb_yield(chunk); }

static int flush_to_block(void *data, const char *bytes, size_t size) {
    yield_context *context = data;
    rb_str_resize(context->chunk, 0);
    rb_str_cat(context->chunk, bytes, (long)size);
    rb_protect(yield_chunk, context->chunk, &context->state);
    return context->state ? -1 : 0;
}

typedef struct {
    uint32_t at;
    int64_t number;
    const char *text;
    size_t size;
    const int64_t *frames;
} write_arguments;

typedef int (*writer)(eng_engine *engine, eng_out *out, void *arguments);

// +target+: a file descriptor (Integer) to write to, or nil: the pieces are yielded.
static VALUE run_writer(eng_engine *engine, bool utf8, writer write, void *arguments, VALUE target) {
    if (arguments && ((write_arguments *)arguments)->at == UINT32_MAX) return Qnil;
    yield_context context = { Qnil, 0, -1 };
    eng_out out;
    if (NIL_P(target)) {
        rb_need_block();
        context.chunk = rb_str_buf_new(1 << 20);
        rb_enc_associate(context.chunk, utf8 ? rb_utf8_encoding() : rb_ascii8bit_encoding());
        eng_out_init(&out, flush_to_block, &context);
    } else {
        context.fd = NUM2INT(target);
        eng_out_init(&out, flush_to_fd, &context);
    }
    int status = write(engine, &out, arguments);
    if (status == 0 && !context.state) status = eng_out_flush(&out);
    eng_out_free(&out);
    if (context.state) rb_jump_tag(context.state);
    if (!NIL_P(context.chunk)) rb_str_resize(context.chunk, 0);
    RB_GC_GUARD(context.chunk);
    if (status < 0) rb_syserr_fail(-status, NIL_P(target) ? "reading the spilled intervals" : "writing the export");
    return Qnil;
}

// A thread known only from the thread table has no intervals: the writers write nothing for it.
static uint32_t thread_at(eng_engine *engine, VALUE serial) { return map_get(&engine->thread_of, NUM2UINT(serial)); }

static int write_chrome_slices(eng_engine *engine, eng_out *out, void *data) {
    write_arguments *arguments = data;
    return eng_chrome_slices(engine, arguments->at, arguments->number, &vocabulary, out);
}

static VALUE pass_chrome_slices(VALUE self, VALUE serial, VALUE pid, VALUE target) {
    eng_engine *engine = get_engine(self);
    write_arguments arguments = { thread_at(engine, serial), NUM2LL(pid), NULL, 0, NULL };
    return run_writer(engine, true, write_chrome_slices, &arguments, target);
}

static int write_chrome_native(eng_engine *engine, eng_out *out, void *data) {
    write_arguments *arguments = data;
    return eng_chrome_native(engine, arguments->at, arguments->text, arguments->size, out);
}

static VALUE pass_chrome_native(VALUE self, VALUE serial, VALUE prefix, VALUE target) {
    eng_engine *engine = get_engine(self);
    StringValue(prefix);
    write_arguments arguments = { thread_at(engine, serial), 0, RSTRING_PTR(prefix), (size_t)RSTRING_LEN(prefix), NULL };
    VALUE result = run_writer(engine, true, write_chrome_native, &arguments, target);
    RB_GC_GUARD(prefix);
    return result;
}

static int write_chrome_counter(eng_engine *engine, eng_out *out, void *data) {
    write_arguments *arguments = data;
    return eng_chrome_counter(engine, arguments->text, arguments->size, out);
}

static VALUE pass_chrome_counter(VALUE self, VALUE prefix, VALUE target) {
    eng_engine *engine = get_engine(self);
    StringValue(prefix);
    write_arguments arguments = { 0, 0, RSTRING_PTR(prefix), (size_t)RSTRING_LEN(prefix), NULL };
    VALUE result = run_writer(engine, true, write_chrome_counter, &arguments, target);
    RB_GC_GUARD(prefix);
    return result;
}

static int write_perfetto_slices(eng_engine *engine, eng_out *out, void *data) {
    write_arguments *arguments = data;
    return eng_perfetto_slices(engine, arguments->at, (uint64_t)arguments->number, &vocabulary, out);
}

static VALUE pass_perfetto_slices(VALUE self, VALUE serial, VALUE track, VALUE target) {
    eng_engine *engine = get_engine(self);
    write_arguments arguments = { thread_at(engine, serial), NUM2LL(track), NULL, 0, NULL };
    return run_writer(engine, false, write_perfetto_slices, &arguments, target);
}

static int write_perfetto_native(eng_engine *engine, eng_out *out, void *data) {
    write_arguments *arguments = data;
    return eng_perfetto_native(engine, arguments->at, arguments->text, arguments->size, out);
}

static VALUE pass_perfetto_native(VALUE self, VALUE serial, VALUE name, VALUE target) {
    eng_engine *engine = get_engine(self);
    StringValue(name);
    write_arguments arguments = { thread_at(engine, serial), 0, RSTRING_PTR(name), (size_t)RSTRING_LEN(name), NULL };
    VALUE result = run_writer(engine, false, write_perfetto_native, &arguments, target);
    RB_GC_GUARD(name);
    return result;
}

static int write_perfetto_counter(eng_engine *engine, eng_out *out, void *data) {
    (void)data;
    return eng_perfetto_counter(engine, out);
}

static VALUE pass_perfetto_counter(VALUE self, VALUE target) {
    return run_writer(get_engine(self), false, write_perfetto_counter, NULL, target);
}

// The name codes a thread's drawn intervals use, in order of first use (speedscope interns its
// frames in that order).
static VALUE pass_speedscope_names(VALUE self, VALUE serial) {
    eng_engine *engine = get_engine(self);
    uint32_t at = thread_at(engine, serial);
    if (at == UINT32_MAX) return rb_ary_new();
    eng_thread *thread = THREAD(engine, at);
    VALUE names = rb_ary_new_capa(thread->name_count);
    for (uint8_t i = 0; i < thread->name_count; i++) rb_ary_push(names, INT2FIX(thread->names[i]));
    return names;
}

static int write_speedscope(eng_engine *engine, eng_out *out, void *data) {
    write_arguments *arguments = data;
    return eng_speedscope_events(engine, arguments->at, arguments->frames, out);
}

// frames: the frame index of each name code (an Array as long as the name codes).
static VALUE pass_speedscope_events(VALUE self, VALUE serial, VALUE frames, VALUE target) {
    eng_engine *engine = get_engine(self);
    Check_Type(frames, T_ARRAY);
    int64_t indexes[ST_COUNT + R_COUNT] = { 0 };
    for (long i = 0; i < RARRAY_LEN(frames) && i < ST_COUNT + R_COUNT; i++) {
        VALUE index = rb_ary_entry(frames, i);
        indexes[i] = NIL_P(index) ? 0 : NUM2LL(index);
    }
    write_arguments arguments = { thread_at(engine, serial), 0, NULL, 0, indexes };
    return run_writer(engine, true, write_speedscope, &arguments, target);
}

#define FIREFOX_TEXT_MAX 256

typedef struct {
    uint32_t at; // first, as in write_arguments (run_writer reads it)
    int column;
    const char *texts[ENG_FIREFOX_KEYS];
    size_t sizes[ENG_FIREFOX_KEYS];
    char copies[ENG_FIREFOX_KEYS][FIREFOX_TEXT_MAX]; // the texts, copied: the block may run the GC
    uint64_t count;
} firefox_arguments;

static int write_firefox(eng_engine *engine, eng_out *out, void *data) {
    firefox_arguments *arguments = data;
    return eng_firefox_column(engine, arguments->at, arguments->column, arguments->texts, arguments->sizes, out,
                              &arguments->count);
}

// column: 0 the start times, 1 the end times, 2 texts (an Array of Strings by key, see output.h);
// returns the number of values written.
static VALUE pass_firefox_column(VALUE self, VALUE serial, VALUE column, VALUE texts, VALUE target) {
    eng_engine *engine = get_engine(self);
    Check_Type(texts, T_ARRAY);
    firefox_arguments arguments;
    memset(&arguments, 0, sizeof(arguments));
    arguments.at = thread_at(engine, serial);
    arguments.column = NUM2INT(column);
    for (long i = 0; i < ENG_FIREFOX_KEYS; i++) {
        VALUE text = rb_ary_entry(texts, i);
        if (NIL_P(text)) {
            arguments.texts[i] = "null";
            arguments.sizes[i] = 4;
            continue;
        }
        StringValue(text);
        if (RSTRING_LEN(text) > FIREFOX_TEXT_MAX) rb_raise(rb_eArgError, "a Firefox column's text is longer than %d bytes", FIREFOX_TEXT_MAX);
        memcpy(arguments.copies[i], RSTRING_PTR(text), (size_t)RSTRING_LEN(text));
        arguments.texts[i] = arguments.copies[i];
        arguments.sizes[i] = (size_t)RSTRING_LEN(text);
    }
    run_writer(engine, true, write_firefox, &arguments, target);
    return ULL2NUM(arguments.count);
}

// Engine.vocabulary(names by name code, reasons by reason code): the words the writers use.
static VALUE engine_vocabulary(VALUE module, VALUE names, VALUE reasons) {
    Check_Type(names, T_ARRAY);
    Check_Type(reasons, T_ARRAY);
    for (long i = 0; i < ST_COUNT + R_COUNT; i++) {
        VALUE name = rb_ary_entry(names, i);
        if (NIL_P(name)) continue;
        StringValue(name);
        free((void *)vocabulary.names[i]);
        vocabulary.name_sizes[i] = (size_t)RSTRING_LEN(name);
        vocabulary.names[i] = strndup(RSTRING_PTR(name), vocabulary.name_sizes[i]);
    }
    for (long i = 0; i < R_COUNT; i++) {
        VALUE reason = rb_ary_entry(reasons, i);
        if (NIL_P(reason)) continue;
        StringValue(reason);
        free((void *)vocabulary.reasons[i]);
        vocabulary.reason_sizes[i] = (size_t)RSTRING_LEN(reason);
        vocabulary.reasons[i] = strndup(RSTRING_PTR(reason), vocabulary.reason_sizes[i]);
    }
    return Qnil;
}

// The words of the engine's numbers (numbering.h), by number, nil where a number has none:
// Engine::EVENT_KINDS, Engine::STATES and Engine::REASONS (test/engine/numbering_test.rb checks the Ruby
// tables against them).
#define KIND_WORD(name, number, word) [name] = word,
#define NAME_WORD(name, word) [name] = word,
static const char *const KIND_WORDS[] = { ENG_EVENT_KINDS(KIND_WORD) };
static const char *const STATE_WORDS[] = { ENG_STATES(NAME_WORD) };
static const char *const REASON_WORDS[] = { ENG_REASONS(NAME_WORD) };

static VALUE words(const char *const *names, long count) {
    VALUE array = rb_ary_new_capa(count);
    for (long i = 0; i < count; i++) rb_ary_push(array, names[i] ? ID2SYM(rb_intern(names[i])) : Qnil);
    return rb_obj_freeze(array);
}

RUBY_FUNC_EXPORTED void Init_gvlscope_engine(void) {
    VALUE mGVLScope = rb_define_module("GVLScope");
    VALUE mEngine = rb_define_module_under(mGVLScope, "Engine");
    rb_define_singleton_method(mEngine, "vocabulary", engine_vocabulary, 2);
    rb_define_const(mEngine, "EVENT_KINDS", words(KIND_WORDS, sizeof(KIND_WORDS) / sizeof(*KIND_WORDS)));
    rb_define_const(mEngine, "STATES", words(STATE_WORDS, ST_COUNT));
    rb_define_const(mEngine, "REASONS", words(REASON_WORDS, R_COUNT));
    // format.h's record layout under its own names, for Ruby's readers and writers of records
    // (Model::Record; test/model/record_test.rb checks them against format.h's text).
    rb_define_const(mEngine, "RECORD_KIND_BITS", INT2FIX(GVLS_RECORD_KIND_BITS));
    rb_define_const(mEngine, "RECORD_THREAD_BITS", INT2FIX(GVLS_RECORD_THREAD_BITS));
    rb_define_const(mEngine, "RECORD_DELTA_SHIFT", INT2FIX(GVLS_RECORD_DELTA_SHIFT));
    rb_define_const(mEngine, "RECORD_MAX_DELTA", ULL2NUM(GVLS_RECORD_MAX_DELTA));
    rb_define_const(mEngine, "MAX_THREAD_SERIAL", UINT2NUM(GVLS_MAX_THREAD_SERIAL));

    cIndex = rb_define_class_under(mEngine, "Index", rb_cObject);
    rb_undef_alloc_func(cIndex);
    rb_define_singleton_method(cIndex, "open", index_open, 3);
    rb_define_singleton_method(cIndex, "imported", index_imported, 3);
    rb_define_method(cIndex, "step", index_step, 1);
    rb_define_method(cIndex, "bytes_done", index_bytes_done, 0);
    rb_define_method(cIndex, "summary", index_summary, 0);
    rb_define_method(cIndex, "memory", index_memory, 0);
    rb_define_method(cIndex, "serials", index_serials, 0);
    rb_define_method(cIndex, "turns", index_turns, 0);

    cPass = rb_define_class_under(mEngine, "Pass", rb_cObject);
    rb_undef_alloc_func(cPass);
    rb_define_singleton_method(cPass, "create", pass_new, 2);
    rb_define_method(cPass, "step", pass_step, 1);
    rb_define_method(cPass, "bytes_done", pass_bytes_done, 0);
    rb_define_method(cPass, "threads", pass_threads, 0);
    rb_define_method(cPass, "histograms", pass_histograms, 1);
    rb_define_method(cPass, "waiters_at_acquire", pass_waiters_at_acquire, 0);
    rb_define_method(cPass, "all_waits_median", pass_all_waits_median, 0);
    rb_define_method(cPass, "blame", pass_blame, 0);
    rb_define_method(cPass, "samples", pass_samples, 0);
    rb_define_method(cPass, "lone_samples", pass_lone_samples, 0);
    rb_define_method(cPass, "sample_count", pass_sample_count, 0);
    rb_define_method(cPass, "code", pass_code, 1);
    rb_define_method(cPass, "release_sites", pass_release_sites, 0);
    rb_define_method(cPass, "overview", pass_overview, 0);
    rb_define_method(cPass, "windows", pass_windows, 0);
    rb_define_method(cPass, "window_columns", pass_window_columns, 0);
    rb_define_method(cPass, "shared_natives?", pass_shared_natives, 0);
    rb_define_method(cPass, "counter_entries", pass_counter_entries, 0);
    rb_define_method(cPass, "memory", pass_memory, 0);
    rb_define_method(cPass, "chrome_slices", pass_chrome_slices, 3);
    rb_define_method(cPass, "chrome_native", pass_chrome_native, 3);
    rb_define_method(cPass, "chrome_counter", pass_chrome_counter, 2);
    rb_define_method(cPass, "perfetto_slices", pass_perfetto_slices, 3);
    rb_define_method(cPass, "perfetto_native", pass_perfetto_native, 3);
    rb_define_method(cPass, "perfetto_counter", pass_perfetto_counter, 1);
    rb_define_method(cPass, "speedscope_names", pass_speedscope_names, 1);
    rb_define_method(cPass, "speedscope_events", pass_speedscope_events, 3);
    rb_define_method(cPass, "firefox_column", pass_firefox_column, 4);
    rb_define_const(mEngine, "FIREFOX_KEYS", INT2FIX(ENG_FIREFOX_KEYS));
}
