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

// ---------------------------------------------------------------- records handed to Ruby
// Every record the engine hands to Ruby is declared once, as a list X(field, value): the field's
// name, a member of its Struct under GVLScope::Engine (ThreadRow, BlameRow, ...: Ruby reads them
// by name, never by position), and the expression the builder puts there (it reads the builder's
// locals: +thread+, +entry+, +interval+, ...). Adding a column is one line in a list plus its uses.
#define FIELD_NAME(field, value) #field,
#define FIELD_VALUE(field, value) , value
// A Struct class under +module+ with a list's fields, in order.
#define DEFINE_RECORD(module, name, LIST) rb_struct_define_under(module, name, LIST(FIELD_NAME) NULL)
// One record of class +klass+ from a list's values (evaluated in the caller's scope).
#define NEW_RECORD(klass, LIST) rb_struct_new(klass LIST(FIELD_VALUE))
// A record of columns: a list's Arrays, made empty, then pushed a value per item.
#define COLUMN_INDEX(field, value) COLUMN_##field,
#define NEW_COLUMN(field, value) columns[COLUMN_##field] = rb_ary_new_capa(size);
#define PUSH_COLUMN(field, value) rb_ary_push(columns[COLUMN_##field], value);

static VALUE cIndexSummary, cMemory, cThreadRow, cHistograms, cBlameRow, cCodeRow, cReleaseSiteRow, cWindowRow,
    cWindowColumns, cSampleColumns, cTurnColumns;

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

// Engine::IndexSummary: what pass 1 learnt of the trace (last_time: nil without events; bad_kind
// and bad_byte: the first unknown event kind in time order and where it is, nil without one).
#define ENG_INDEX_SUMMARY(X)                                                                       \
    X(events, ULL2NUM(index->events))                                                              \
    X(stack_records, ULL2NUM(index->stack_records))                                                \
    X(last_time, index->has_events ? LL2NUM(index->max_time) : Qnil)                               \
    X(bad_kind, index->bad ? UINT2NUM(index->bad_kind) : Qnil)                                     \
    X(bad_byte, index->bad ? ULL2NUM(index->bad_byte) : Qnil)

static VALUE index_summary(VALUE self) {
    eng_index *index = &get_index(self)->index;
    return NEW_RECORD(cIndexSummary, ENG_INDEX_SUMMARY);
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

// Engine::TurnColumns: the event loops' turn records (version 4), in (time, file order), a column
// per field (value: the fiber's serial after TURN_BEGIN, the stack id after TURN_SITE, else 0).
#define ENG_TURN_COLUMNS(X)                                                                        \
    X(times, LL2NUM(turn->time))                                                                   \
    X(serials, UINT2NUM(turn->serial))                                                             \
    X(kinds, UINT2NUM(turn->kind))                                                                 \
    X(values, UINT2NUM(turn->arg))

static VALUE index_turns(VALUE self) {
    eng_index *index = &get_index(self)->index;
    size_t count = index->turns.size;
    eng_turn_record *sorted = ALLOC_N(eng_turn_record, count + 1);
    if (count) memcpy(sorted, index->turns.data, count * sizeof(eng_turn_record));
    if (count > 1) qsort(sorted, count, sizeof(eng_turn_record), compare_turn_records);
    enum { ENG_TURN_COLUMNS(COLUMN_INDEX) COLUMN_COUNT };
    VALUE columns[COLUMN_COUNT];
    long size = (long)count;
    ENG_TURN_COLUMNS(NEW_COLUMN)
    for (size_t i = 0; i < count; i++) {
        const eng_turn_record *turn = &sorted[i];
        ENG_TURN_COLUMNS(PUSH_COLUMN)
    }
    xfree(sorted);
    return rb_class_new_instance(COLUMN_COUNT, columns, cTurnColumns);
}

// Engine::Memory: what the engine's allocations hold now and held at most, and the bytes of a
// pass's interval spill (an index has none).
#define ENG_MEMORY(X)                                                                              \
    X(current_bytes, SIZET2NUM(memory->current))                                                   \
    X(peak_bytes, SIZET2NUM(memory->peak))                                                         \
    X(spill_bytes, ULL2NUM(spill))

static VALUE memory_record(const eng_memory *memory, uint64_t spill) { return NEW_RECORD(cMemory, ENG_MEMORY); }

static VALUE index_memory(VALUE self) { return memory_record(&get_index(self)->index.memory, 0); }

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

// [[reason code, releases], ...] in order of first release.
static VALUE released_by(const eng_thread *thread) {
    VALUE released = rb_ary_new_capa(thread->release_kinds);
    for (uint8_t k = 0; k < thread->release_kinds; k++) {
        uint8_t reason = thread->release_order[k];
        rb_ary_push(released, rb_ary_new_from_args(2, INT2FIX(reason), ULL2NUM(thread->released[reason])));
    }
    return released;
}

// [[reason code, idle ns], ...] for the reasons with idle time, by reason code.
static VALUE idle_by_reason(const eng_thread *thread) {
    VALUE idle = rb_ary_new();
    for (uint8_t reason = 0; reason < R_COUNT; reason++) {
        if (thread->idle_by_reason[reason] > 0) {
            rb_ary_push(idle, rb_ary_new_from_args(2, INT2FIX(reason), LL2NUM(thread->idle_by_reason[reason])));
        }
    }
    return idle;
}

static VALUE time_or_nil(bool has, int64_t time) { return has ? LL2NUM(time) : Qnil; }

// Engine::ThreadRow: a thread's sums (Analysis::ThreadStats::Row tells what each means). Spans
// (longest_*) are [start, end] or nil; first_*: the start of the thread's first wait, first wait
// after a blocking call and first wait during a GC (nil: none), which order Analysis::Blame's hashes.
#define ENG_THREAD_ROW(X)                                                                          \
    X(serial, UINT2NUM(thread->serial))                                                            \
    X(ractor_id, UINT2NUM(RACTOR(engine, thread->ractor)->id))                                     \
    X(run_ns, LL2NUM(thread->totals[ST_RUN]))                                                      \
    X(wait_ns, LL2NUM(thread->totals[ST_WAIT]))                                                    \
    X(idle_ns, LL2NUM(thread->totals[ST_IDLE]))                                                    \
    X(gc_ns, LL2NUM(thread->totals[ST_GC]))                                                        \
    X(holds, ULL2NUM(thread->holds))                                                               \
    X(waits, ULL2NUM(thread->waits))                                                               \
    X(longest_wait_ns, LL2NUM(thread->has_longest_wait ? thread->longest_wait[1] - thread->longest_wait[0] : 0)) \
    X(released_by, released_by(thread))                                                            \
    X(longest_run, span(thread->has_longest_run, thread->longest_run))                             \
    X(longest_wait, span(thread->has_longest_wait, thread->longest_wait))                          \
    X(blocking_waits, ULL2NUM(thread->blocking_waits))                                             \
    X(slow_blocking_waits, ULL2NUM(thread->slow_blocking_waits))                                   \
    X(blocking_wait_ns, LL2NUM(thread->blocking_wait_ns))                                          \
    X(median_slow_blocking_wait_ns, LL2NUM(eng_median_value(&thread->slow_median)))                \
    X(longest_slow_blocking_wait, span(thread->has_longest_slow, thread->longest_slow))            \
    X(median_wait_ns, LL2NUM(eng_median_value(&thread->wait_median)))                              \
    X(first_wait, time_or_nil(thread->has_first_wait, thread->first_wait))                         \
    X(first_after_blocking, time_or_nil(thread->has_first_after_blocking, thread->first_after_blocking)) \
    X(first_gc, time_or_nil(thread->has_first_gc, thread->first_gc))                               \
    X(during_gc_ns, LL2NUM(thread->during_gc))                                                     \
    X(drawn, thread->drawn ? Qtrue : Qfalse)                                                       \
    X(longest_gc, span(thread->has_longest_gc, thread->longest_gc))                                \
    X(long_streaks, ULL2NUM(thread->long_streaks))                                                 \
    X(long_streak_held_ns, LL2NUM(thread->long_streak_held))                                       \
    X(longest_streak, span(thread->has_longest_streak, thread->longest_streak))                    \
    X(longest_streak_held_ns, LL2NUM(thread->longest_streak_held))                                 \
    X(idle_by_reason, idle_by_reason(thread))                                                      \
    X(io_overlap_wait_ns, LL2NUM(thread->overlap_counted))                                         \
    X(held_off_cpu_ns, LL2NUM(thread->held_off))                                                   \
    X(long_streak_off_cpu_ns, LL2NUM(thread->long_streak_off))                                     \
    X(longest_streak_off_cpu_ns, LL2NUM(thread->longest_streak_off))

// A ThreadRow per thread seen in events, in order of first appearance.
static VALUE pass_threads(VALUE self) {
    eng_engine *engine = get_engine(self);
    VALUE rows = rb_ary_new_capa((long)engine->order.size);
    for (size_t i = 0; i < engine->order.size; i++) {
        const eng_thread *thread = THREAD(engine, VEC_AT(engine->order, uint32_t, i));
        rb_ary_push(rows, NEW_RECORD(cThreadRow, ENG_THREAD_ROW));
    }
    return rows;
}

// Engine::Histograms: the log2 buckets' counts of holds and of waits (Analysis::Histograms).
#define ENG_HISTOGRAMS(X)                                                                          \
    X(hold_ns, counts(holds, LOG2_BUCKETS))                                                        \
    X(wait_ns, counts(waits, LOG2_BUCKETS))

// The Histograms summed over the threads with these serials (all when nil).
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
    return NEW_RECORD(cHistograms, ENG_HISTOGRAMS);
}

static VALUE pass_waiters_at_acquire(VALUE self) {
    return counts(get_engine(self)->waiters_at_acquire, LOG2_BUCKETS);
}

static VALUE pass_all_waits_median(VALUE self) { return LL2NUM(eng_median_value(&get_engine(self)->all_waits)); }

static VALUE serial_of(eng_engine *engine, uint32_t at) { return UINT2NUM(THREAD(engine, at)->serial); }

// Engine::BlameRow: a waiter's wait while a holder (nil: nobody, the hand-off) held the GVL, over
// all its waits and over those after a blocking call (nil: none), each with the sequence number
// of its first overlap (Analysis::Blame adds them up in that order).
#define ENG_BLAME_ROW(X)                                                                           \
    X(waiter, serial_of(engine, entry->a))                                                         \
    X(holder, entry->b ? serial_of(engine, entry->b - 1) : Qnil)                                   \
    X(all_ns, entry->has_all ? LL2NUM(entry->all_ns) : Qnil)                                       \
    X(all_seq, ULL2NUM(entry->all_seq))                                                            \
    X(after_blocking_ns, entry->has_after_blocking ? LL2NUM(entry->after_blocking_ns) : Qnil)      \
    X(after_blocking_seq, ULL2NUM(entry->after_blocking_seq))

static VALUE pass_blame(VALUE self) {
    eng_engine *engine = get_engine(self);
    VALUE rows = rb_ary_new_capa((long)engine->pairs.size);
    for (size_t i = 0; i < engine->pairs.size; i++) {
        const eng_pair *entry = &VEC_AT(engine->pairs, eng_pair, i);
        rb_ary_push(rows, NEW_RECORD(cBlameRow, ENG_BLAME_ROW));
    }
    return rows;
}

// Engine::SampleColumns: the holders' samples in time order, a column per field (no object per
// sample: Model::Scan#samples makes its own).
#define ENG_SAMPLE_COLUMNS(X)                                                                      \
    X(times, LL2NUM(sample->time))                                                                 \
    X(holders, UINT2NUM(THREAD(engine, sample->thread)->serial))                                   \
    X(stack_ids, UINT2NUM(sample->stack))                                                          \
    X(waiters, LL2NUM(sample->waiters))

static VALUE sample_columns(eng_engine *engine, const eng_vec *samples) {
    enum { ENG_SAMPLE_COLUMNS(COLUMN_INDEX) COLUMN_COUNT };
    VALUE columns[COLUMN_COUNT];
    long size = (long)samples->size;
    ENG_SAMPLE_COLUMNS(NEW_COLUMN)
    for (size_t i = 0; i < samples->size; i++) {
        const eng_sample *sample = &VEC_AT(*samples, eng_sample, i);
        ENG_SAMPLE_COLUMNS(PUSH_COLUMN)
    }
    return rb_class_new_instance(COLUMN_COUNT, columns, cSampleColumns);
}

static VALUE pass_samples(VALUE self) { eng_engine *engine = get_engine(self); return sample_columns(engine, &engine->samples); }
// Those no thread waited for (an event loop's long turn), the same way.
static VALUE pass_lone_samples(VALUE self) { eng_engine *engine = get_engine(self); return sample_columns(engine, &engine->lone_samples); }

static VALUE pass_sample_count(VALUE self) { return SIZET2NUM(get_engine(self)->samples.size); }

// Engine::CodeRow: a stack's samples, of a thread (nil: all holders), weighted (by waiters, or
// their count for :waiters), with the sequence number of its first sample.
#define ENG_CODE_ROW(X)                                                                            \
    X(thread, pairs == &engine->stacks_sampled ? Qnil : serial_of(engine, entry->a))               \
    X(stack_id, UINT2NUM(entry->b))                                                                \
    X(weight, LL2NUM(entry->all_ns))                                                               \
    X(count, ULL2NUM(entry->count))                                                                \
    X(seq, ULL2NUM(entry->all_seq))

// Code locations, CodeRows of +kind+: :holders (per holder), :stacks (all holders), :waiters
// (samples during waits).
static VALUE pass_code(VALUE self, VALUE kind) {
    eng_engine *engine = get_engine(self);
    ID id = SYM2ID(kind);
    eng_vec *pairs = id == rb_intern("holders") ? &engine->holder_stacks
                     : id == rb_intern("stacks") ? &engine->stacks_sampled
                                                 : &engine->waiter_stacks;
    VALUE rows = rb_ary_new_capa((long)pairs->size);
    for (size_t i = 0; i < pairs->size; i++) {
        const eng_pair *entry = &VEC_AT(*pairs, eng_pair, i);
        rb_ary_push(rows, NEW_RECORD(cCodeRow, ENG_CODE_ROW));
    }
    return rows;
}

// Engine::ReleaseSiteRow: a thread's releases of the GVL at a site (its stack id) for a reason
// (code), and the ns it then waited for the GVL.
#define ENG_RELEASE_SITE_ROW(X)                                                                    \
    X(thread, serial_of(engine, entry->a))                                                         \
    X(site_id, UINT2NUM(entry->b))                                                                 \
    X(reason, UINT2NUM(entry->reason))                                                             \
    X(waited_ns, LL2NUM(entry->all_ns))                                                            \
    X(releases, ULL2NUM(entry->count))

// The ReleaseSiteRows, each thread's in order of first release.
static VALUE pass_release_sites(VALUE self) {
    eng_engine *engine = get_engine(self);
    VALUE rows = rb_ary_new_capa((long)engine->sites.size);
    for (size_t i = 0; i < engine->sites.size; i++) {
        const eng_pair *entry = &VEC_AT(engine->sites, eng_pair, i);
        rb_ary_push(rows, NEW_RECORD(cReleaseSiteRow, ENG_RELEASE_SITE_ROW));
    }
    return rows;
}

// { serial => [bins * LANE_STATES Integers] } for the threads with time in run, wait, idle or gc:
// each bin's ns in each of Engine::LANE_STATES, in that order (Analysis::Overview#lane).
static VALUE pass_overview(VALUE self) {
    eng_engine *engine = get_engine(self);
    VALUE lanes = rb_hash_new();
    for (size_t i = 0; i < engine->order.size; i++) {
        eng_thread *thread = THREAD(engine, VEC_AT(engine->order, uint32_t, i));
        if (!thread->bins) continue;
        VALUE lane = rb_ary_new_capa((long)engine->bins * LANE_STATES);
        for (int64_t bin = 0; bin < engine->bins; bin++) {
            bool inside = bin >= thread->bin_low && bin < thread->bin_low + thread->bin_count;
            for (int state = 0; state < LANE_STATES; state++) {
                rb_ary_push(lane, inside ? LL2NUM(thread->bins[(bin - thread->bin_low) * LANE_STATES + state]) : INT2FIX(0));
            }
        }
        rb_hash_aset(lanes, UINT2NUM(thread->serial), lane);
    }
    return lanes;
}

// Engine::WindowRow: an interval found in a window (Model::Interval): native nil where the trace
// has none, site_id 0 without a release site, index: its place among its thread's intervals.
#define ENG_WINDOW_ROW(X)                                                                          \
    X(thread, serial_of(engine, interval->thread))                                                 \
    X(state, INT2FIX(interval->state))                                                             \
    X(reason, INT2FIX(interval->reason))                                                           \
    X(start_ns, LL2NUM(interval->start))                                                           \
    X(end_ns, LL2NUM(interval->end))                                                               \
    X(native, interval->has_native ? UINT2NUM(interval->native) : Qnil)                            \
    X(site_id, UINT2NUM(interval->site))                                                           \
    X(index, ULL2NUM(entry->listed))

// Per window, its WindowRows in time order.
static VALUE pass_windows(VALUE self) {
    eng_engine *engine = get_engine(self);
    VALUE windows = rb_ary_new_capa((long)engine->window_count);
    for (size_t w = 0; w < engine->window_count; w++) {
        eng_vec *found = &engine->windows[w].found;
        VALUE list = rb_ary_new_capa((long)found->size);
        for (size_t i = 0; i < found->size; i++) {
            const eng_found *entry = &VEC_AT(*found, eng_found, i);
            const eng_interval *interval = &entry->interval;
            rb_ary_push(list, NEW_RECORD(cWindowRow, ENG_WINDOW_ROW));
        }
        rb_ary_push(windows, list);
    }
    return windows;
}

// Engine::WindowColumns: a window's intervals as columns of Integers (no object per interval: the
// HTML report's windows hold up to its whole budget).
#define ENG_WINDOW_COLUMNS(X)                                                                      \
    X(serials, serial_of(engine, interval->thread))                                                \
    X(states, INT2FIX(interval->state))                                                            \
    X(reasons, INT2FIX(interval->reason))                                                          \
    X(starts, LL2NUM(interval->start))                                                             \
    X(ends, LL2NUM(interval->end))

// Per window, its WindowColumns. Each window's intervals are freed as its columns are made: a
// second call finds none.
static VALUE pass_window_columns(VALUE self) {
    eng_engine *engine = get_engine(self);
    VALUE windows = rb_ary_new_capa((long)engine->window_count);
    enum { ENG_WINDOW_COLUMNS(COLUMN_INDEX) COLUMN_COUNT };
    for (size_t w = 0; w < engine->window_count; w++) {
        eng_vec *found = &engine->windows[w].found;
        long size = (long)found->size;
        VALUE columns[COLUMN_COUNT];
        ENG_WINDOW_COLUMNS(NEW_COLUMN)
        for (size_t i = 0; i < found->size; i++) {
            const eng_interval *interval = &VEC_AT(*found, eng_found, i).interval;
            ENG_WINDOW_COLUMNS(PUSH_COLUMN)
        }
        vec_free(&engine->memory, found);
        rb_ary_push(windows, rb_class_new_instance(COLUMN_COUNT, columns, cWindowColumns));
    }
    return windows;
}

static VALUE pass_shared_natives(VALUE self) { return get_engine(self)->shared_natives ? Qtrue : Qfalse; }
static VALUE pass_counter_entries(VALUE self) { return ULL2NUM(get_engine(self)->counter_entries); }

static VALUE pass_memory(VALUE self) {
    eng_engine *engine = get_engine(self);
    return memory_record(&engine->memory, engine->spill_size);
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
// Engine::EVENT_KINDS, Engine::STATES, Engine::REASONS and Engine::LANE_STATES
// (test/engine/numbering_test.rb checks the Ruby tables against them).
#define KIND_WORD(name, number, word) [name] = word,
#define NAME_WORD(name, word) [name] = word,
#define LANE_WORD(state) lane_words[LANE_##state] = STATE_WORDS[state];
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
    const char *lane_words[LANE_STATES];
    ENG_LANE_STATES(LANE_WORD)
    rb_define_const(mEngine, "LANE_STATES", words(lane_words, LANE_STATES));
    // The records, from their lists (each Struct's members are its fields, in order).
    cIndexSummary = DEFINE_RECORD(mEngine, "IndexSummary", ENG_INDEX_SUMMARY);
    cTurnColumns = DEFINE_RECORD(mEngine, "TurnColumns", ENG_TURN_COLUMNS);
    cMemory = DEFINE_RECORD(mEngine, "Memory", ENG_MEMORY);
    cThreadRow = DEFINE_RECORD(mEngine, "ThreadRow", ENG_THREAD_ROW);
    cHistograms = DEFINE_RECORD(mEngine, "Histograms", ENG_HISTOGRAMS);
    cBlameRow = DEFINE_RECORD(mEngine, "BlameRow", ENG_BLAME_ROW);
    cSampleColumns = DEFINE_RECORD(mEngine, "SampleColumns", ENG_SAMPLE_COLUMNS);
    cCodeRow = DEFINE_RECORD(mEngine, "CodeRow", ENG_CODE_ROW);
    cReleaseSiteRow = DEFINE_RECORD(mEngine, "ReleaseSiteRow", ENG_RELEASE_SITE_ROW);
    cWindowRow = DEFINE_RECORD(mEngine, "WindowRow", ENG_WINDOW_ROW);
    cWindowColumns = DEFINE_RECORD(mEngine, "WindowColumns", ENG_WINDOW_COLUMNS);
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
