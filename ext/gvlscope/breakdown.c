// GVLScope::Breakdown's series (lib/gvlscope/recorder/breakdown.rb): the sums of one route's or job
// class's requests. A request is added in one C call, which holds the GVL from start to end, so
// threads adding at once need no Mutex and a snapshot never sees half an add (in Ruby, a Mutex and
// nine Array updates cost a hello-world request ~14,000 instructions; this call ~200).
#include "gvlscope.h"
#include "handoff.h"
#include "fibers.h"
#include "request_timing.h"
#include "histogram.h"
#include <ruby/encoding.h>
#include <string.h>

// The sums: the count, then a request's values in request_timing.h's GVLS_REQUEST_FIELDS order;
// wait_ns is the one a series' histogram buckets.
enum { COUNT, FIRST_VALUE, SUMS = FIRST_VALUE + GVLS_REQUEST_VALUES };
#define VALUE_NAME(name, value, reader) #name,
static const char *const value_names[] = { GVLS_REQUEST_FIELDS(VALUE_NAME) };
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

static void add(series *s, const uint64_t values[GVLS_REQUEST_VALUES], double sample_rate) {
    s->sums[COUNT] += 1;
    for (int i = 0; i < GVLS_REQUEST_VALUES; i++) s->sums[FIRST_VALUE + i] += values[i];
    s->sample_rate = sample_rate;
    unsigned bucket = gvls_log2_bucket(values[GVLS_REQUEST_wait_ns]);
    s->buckets[bucket < BUCKETS ? bucket : BUCKETS - 1] += 1;
}

static ID value_ids[GVLS_REQUEST_VALUES];

// series.add(timing, sample_rate): a RequestTiming's numbers, or those of anything answering them
// by name (a value it does not answer, or answers nil, counts 0). All are read, and converted
// (raising if one is not a number), before anything is added.
static VALUE series_add(VALUE self, VALUE timing, VALUE sample_rate) {
    uint64_t values[GVLS_REQUEST_VALUES];
    if (!gvls_request_timing_values(timing, values)) {
        for (int i = 0; i < GVLS_REQUEST_VALUES; i++) {
            VALUE value = rb_check_funcall(timing, value_ids[i], 0, NULL);
            values[i] = value == Qundef || NIL_P(value) ? 0 : NUM2ULL(value);
        }
    }
    add(series_of(self), values, NUM2DBL(sample_rate));
    return self;
}

// [count, *request values, sample_rate, *64 buckets]: BreakdownSeries::FIELDS names all but the buckets.
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

// Writes the n bytes of path p to out with each id stem replaced by ":id" (out has room for 2n + 1
// bytes: an id stem is at least one byte and ids are "/"-separated); returns the length written.
// *ids: how many were replaced.
static long put_template(const unsigned char *p, long n, char *out, int *ids) {
    long copied = 0, len = 0;  // copied: bytes of path already in out
    *ids = 0;
    for (long start = 0; start <= n;) {
        long end = start;
        while (end < n && p[end] != '/') end++;
        long stem_end = start;
        while (stem_end < end && p[stem_end] != '.') stem_end++;
        if (stem_end > start && is_id(p + start, stem_end - start)) {
            memcpy(out + len, p + copied, start - copied);
            len += start - copied;
            memcpy(out + len, ":id", 3);
            len += 3;
            copied = stem_end;
            (*ids)++;
        }
        start = end + 1;
    }
    memcpy(out + len, p + copied, n - copied);
    return len + n - copied;
}

// Native.route_template(method, path) -> "GET /users/:id/posts", or nil when the path has no id.
static VALUE route_template(VALUE self, VALUE method, VALUE path) {
    StringValue(method);
    StringValue(path);
    long n = RSTRING_LEN(path);
    VALUE buffer = 0;
    char *out = ALLOCV(buffer, 2 * n + 1);
    int ids;
    long len = put_template((const unsigned char *)RSTRING_PTR(path), n, out, &ids);
    VALUE template = Qnil;
    if (ids) {
        template = rb_str_buf_new(RSTRING_LEN(method) + 1 + len);
        rb_str_buf_append(template, method);
        rb_str_buf_cat(template, " ", 1);
        rb_str_buf_cat(template, out, len);
        rb_enc_associate(template, rb_enc_get(path));
    }
    ALLOCV_END(buffer);
    return template;
}

// GVLScope::Rack's work per request in two C calls (Native::RackRequests): #start makes the
// request's timing and puts it in env; #finish finishes it, adds the request to its route's series
// and adds the Server-Timing header. Every Ruby step the middleware leaves to these calls is
// ~20-30 instructions a request (docs/performance.md, "Per-route numbers").
//
// The route in #finish, for the common request: the built-in label is built in a stack buffer from env, as
// GVLScope::RouteLabel builds it, looked up among the labels seen before, and the request added
// to that label's series. In Ruby (RouteLabel, Breakdown.record: method calls, ~8 String-keyed
// Hash lookups) this cost a hello-world request ~5,200 instructions. Anything else (a label not
// seen yet, Rails' keys, a non-ASCII or long path, an odd env or response) is left to Ruby, which
// then tells the table the label's series (#remember).
enum { MAX_PATH = 1024, MAX_LABEL = 16 + 2 * MAX_PATH + 1, TABLE_SLOTS = 1024, MAX_ENTRIES = TABLE_SLOTS / 2 };

typedef struct {
    uint64_t hash;
    VALUE key;     // frozen String, ASCII only (route_key); 0: empty slot
    VALUE series;  // the BreakdownSeries of its label (maybe "other"'s, past the cap)
    VALUE owner;   // the controller class a Rails key names by address (kept alive), or Qnil
} route_entry;

// Who names a request's route: C (the built-in labels of routes seen before), Ruby (a route
// function, or no label known yet here), or nobody (route: false).
enum { ROUTES_OFF, ROUTES_BUILT_IN, ROUTES_IN_RUBY };

typedef struct {
    route_entry *slots;  // TABLE_SLOTS, open addressing; NULL until the first #remember
    long count;
    unsigned long generation;  // breakdown_generation when filled: the series are that generation's
    double sample_rate;
    VALUE add_header;  // GVLScope::Rack's server_timing option (true or false): #finish adds the header
    int routes;        // ROUTES_*
    int after_response;  // the middleware has more to do after each response (a log, the flight recorder)
    // Whether Rails (ActionDispatch) and Sinatra were loaded at the last #remember: only they set
    // the env keys that make a label theirs, and each lookup of a key hashes it (~200
    // instructions for Rails' 39 characters). An app loads them before its first request, whose
    // route is always new here.
    int rails_loaded, sinatra_loaded;
} route_table;

static ID id_ActionDispatch, id_Sinatra;

// Bumped by Breakdown (reset, fork, new caps): every table's series are then stale.
static unsigned long breakdown_generation;

// Native.request_callbacks = on: GVLScope.on_request has callbacks (GVLScope::Callbacks), which
// Ruby runs after each request, as it does a table's after_response work; none: one load a request.
static int request_callbacks;

static void table_mark(void *ptr) {
    route_table *t = ptr;
    if (!t->slots) return;
    for (long i = 0; i < TABLE_SLOTS; i++) {
        if (!t->slots[i].key) continue;
        rb_gc_mark(t->slots[i].key);
        rb_gc_mark(t->slots[i].series);
        rb_gc_mark(t->slots[i].owner);
    }
}

static void table_free(void *ptr) {
    route_table *t = ptr;
    xfree(t->slots);
    xfree(t);
}

static size_t table_size(const void *ptr) {
    const route_table *t = ptr;
    return sizeof(*t) + (t->slots ? TABLE_SLOTS * sizeof(route_entry) : 0);
}

static const rb_data_type_t table_type = {
    .wrap_struct_name = "GVLScope::Native::RackRequests",
    .function = { .dmark = table_mark, .dfree = table_free, .dsize = table_size },
    .flags = RUBY_TYPED_FREE_IMMEDIATELY | RUBY_TYPED_WB_PROTECTED,
};

static VALUE table_alloc(VALUE klass) {
    route_table *t;
    VALUE obj = TypedData_Make_Struct(klass, route_table, &table_type, t);
    t->sample_rate = 1.0;
    return obj;
}

// As rb_check_typeddata, the common case inline (once per web request).
static inline route_table *table_of(VALUE self) {
    if (RB_LIKELY(RB_TYPE_P(self, T_DATA) && RTYPEDDATA_P(self) && RTYPEDDATA_TYPE(self) == &table_type))
        return RTYPEDDATA_GET_DATA(self);
    return rb_check_typeddata(self, &table_type);
}

static ID id_built_in, id_ruby, id_off;

// RackRequests.new(sample_rate, add_header, routes, after_response): routes is :built_in, :ruby or :off.
static VALUE table_initialize(VALUE self, VALUE sample_rate, VALUE add_header, VALUE routes, VALUE after_response) {
    route_table *t = table_of(self);
    t->sample_rate = NUM2DBL(sample_rate);
    t->add_header = RTEST(add_header) ? Qtrue : Qfalse;  // not an object to mark
    ID mode = SYMBOL_P(routes) ? SYM2ID(routes) : 0;
    if (mode == id_built_in) t->routes = ROUTES_BUILT_IN;
    else if (mode == id_ruby) t->routes = ROUTES_IN_RUBY;
    else if (mode == id_off) t->routes = ROUTES_OFF;
    else rb_raise(rb_eArgError, "routes must be :built_in, :ruby or :off, got %"PRIsVALUE, rb_inspect(routes));
    t->after_response = RTEST(after_response);
    return self;
}

static VALUE key_env;  // "gvlscope"

// requests.start(env) -> timing: a RequestTiming of the current thread, started now, as env["gvlscope"].
static VALUE table_start(VALUE self, VALUE env) {
    // The wait before the app: the connection's hand-off (handoff.c), looked for while some are pending.
    // On an event loop's task (Falcon): the wait for the loop since the request's bytes came (fibers.c).
    // Else a wait since the thread's previous request is clipped at its bytes' arrival (request_timing.c).
    VALUE timing = gvls_request_timing_start_current(gvls_handoff_rack && gvls_handoff_pending ? gvls_handoff_fd_of_env(env) : -1,
                                                     gvls_fibers_on_task() ? gvls_fibers_fd_of_env(env) : -1, env);
    if (RB_LIKELY(RB_TYPE_P(env, T_HASH))) rb_hash_aset(env, key_env, timing);
    else rb_funcall(env, rb_intern("[]="), 2, key_env, timing);  // env is a Hash (Rack's SPEC); anything else as Ruby would
    return timing;
}

static void table_forget_stale(route_table *t) {
    if (t->generation == breakdown_generation) return;
    if (t->slots) memset(t->slots, 0, TABLE_SLOTS * sizeof(route_entry));
    t->count = 0;
    t->generation = breakdown_generation;
}

// FNV-1a; *ascii: whether every byte is below 128 (a non-ASCII path's label is Ruby's: its
// encoding is part of it).
static uint64_t key_hash(const char *p, long n, int *ascii) {
    uint64_t hash = 14695981039346656037ULL;
    unsigned char high = 0;
    for (long i = 0; i < n; i++) {
        high |= (unsigned char)p[i];
        hash = (hash ^ (unsigned char)p[i]) * 1099511628211ULL;
    }
    *ascii = !(high & 0x80);
    return hash;
}

// The slot holding key, or the empty slot where it goes.
static route_entry *table_slot(route_table *t, uint64_t hash, const char *key, long n) {
    for (unsigned long i = hash;; i++) {
        route_entry *entry = &t->slots[i % TABLE_SLOTS];
        if (!entry->key) return entry;
        if (entry->hash == hash && RSTRING_LEN(entry->key) == n && memcmp(RSTRING_PTR(entry->key), key, n) == 0)
            return entry;
    }
}

static VALUE key_rails, key_controller, key_sinatra, key_method, key_script_name, key_path_info;
static VALUE sym_controller, sym_action;
static ID id_action_name;

static VALUE call_action_name(VALUE controller) { return rb_funcallv(controller, id_action_name, 0, NULL); }

// A Rails request's key: the controller that handled it (its class by address, its action), as
// "\1<class address in hex>#show"; without one, the router's parameters, "\2admin/users#show".
// -1 when Ruby must name it.
static long rails_key(VALUE env, VALUE params, char *out, VALUE *owner) {
    VALUE controller = rb_hash_lookup2(env, key_controller, Qnil);
    if (RTEST(controller)) {
        int raised;
        VALUE action = rb_protect(call_action_name, controller, &raised);
        if (raised) {  // Ruby calls it again, and warns
            rb_set_errinfo(Qnil);
            return -1;
        }
        if (!RB_TYPE_P(action, T_STRING) || RSTRING_LEN(action) > MAX_PATH) return -1;
        *owner = rb_obj_class(controller);
        uintptr_t address = (uintptr_t)*owner;
        long len = 0;
        out[len++] = '\1';
        for (int shift = 60; shift >= 0; shift -= 4) out[len++] = "0123456789abcdef"[(address >> shift) & 15];
        out[len++] = '#';
        memcpy(out + len, RSTRING_PTR(action), RSTRING_LEN(action));
        return len + RSTRING_LEN(action);
    }
    if (!RB_TYPE_P(params, T_HASH)) return -1;
    VALUE name = rb_hash_lookup2(params, sym_controller, Qnil);
    VALUE action = rb_hash_lookup2(params, sym_action, Qnil);
    if (!RB_TYPE_P(name, T_STRING) || !RB_TYPE_P(action, T_STRING) || RSTRING_LEN(name) + RSTRING_LEN(action) > MAX_PATH)
        return -1;
    long len = 0;
    out[len++] = '\2';
    memcpy(out + len, RSTRING_PTR(name), RSTRING_LEN(name));
    len += RSTRING_LEN(name);
    out[len++] = '#';
    memcpy(out + len, RSTRING_PTR(action), RSTRING_LEN(action));
    return len + RSTRING_LEN(action);
}

// The key of a request's built-in label (GVLScope::RouteLabel#call) into out (MAX_LABEL bytes):
// the same key, the same label. For a plain Rack or Sinatra request the key is the label itself,
// built as RouteLabel builds it; for a Rails request what its label is made from (rails_key). -1
// when Ruby must name it. Each env lookup costs ~110 instructions on Ruby 3.4 (the keys are
// interned: compared by identity, their hash cached), ~240 on 3.3 (SipHash of the key each time).
static long route_key(const route_table *t, VALUE env, long status, char *out, VALUE *owner) {
    *owner = Qnil;
    VALUE params = t->rails_loaded ? rb_hash_lookup2(env, key_rails, Qnil) : Qnil;
    if (RTEST(params)) return rails_key(env, params, out, owner);
    VALUE sinatra = t->sinatra_loaded ? rb_hash_lookup2(env, key_sinatra, Qnil) : Qnil;
    if (RTEST(sinatra)) {
        if (!RB_TYPE_P(sinatra, T_STRING) || RSTRING_LEN(sinatra) > MAX_LABEL) return -1;
        memcpy(out, RSTRING_PTR(sinatra), RSTRING_LEN(sinatra));
        return RSTRING_LEN(sinatra);
    }
    VALUE method = rb_hash_lookup2(env, key_method, Qnil);
    if (!RB_TYPE_P(method, T_STRING) || RSTRING_LEN(method) > 15) return -1;
    long len = RSTRING_LEN(method);
    memcpy(out, RSTRING_PTR(method), len);
    if (status == 404) {
        memcpy(out + len, " (not found)", 12);
        return len + 12;
    }
    out[len++] = ' ';
    VALUE script_name = rb_hash_lookup2(env, key_script_name, Qnil);
    VALUE path_info = rb_hash_lookup2(env, key_path_info, Qnil);
    if (!NIL_P(script_name) && !RB_TYPE_P(script_name, T_STRING)) return -1;
    if (!NIL_P(path_info) && !RB_TYPE_P(path_info, T_STRING)) return -1;
    long script_len = NIL_P(script_name) ? 0 : RSTRING_LEN(script_name);
    long path_len = NIL_P(path_info) ? 0 : RSTRING_LEN(path_info);
    if (script_len + path_len > MAX_PATH) return -1;
    const char *path = path_len ? RSTRING_PTR(path_info) : "/";
    char joined[MAX_PATH + 1];
    if (script_len) {  // the template is of the whole path (a segment could span the two)
        memcpy(joined, RSTRING_PTR(script_name), script_len);
        memcpy(joined + script_len, RSTRING_PTR(path_info), path_len);
        path = joined;
    }
    long n = script_len + path_len;
    if (n == 0) n = 1;  // "/"
    int ids;
    return len + put_template((const unsigned char *)path, n, out + len, &ids);
}

// The request's key into key (MAX_LABEL bytes) and its slot (found, or the empty one where it
// goes); NULL when C cannot key it.
static route_entry *request_slot(route_table *t, VALUE env, VALUE response, char *key, long *n, VALUE *owner) {
    if (!t->slots || !RB_TYPE_P(env, T_HASH) || !RB_TYPE_P(response, T_ARRAY) || RARRAY_LEN(response) < 1) return NULL;
    VALUE status = RARRAY_AREF(response, 0);
    if (!FIXNUM_P(status)) return NULL;
    *n = route_key(t, env, FIX2LONG(status), key, owner);
    if (*n < 0) return NULL;
    int ascii;
    uint64_t hash = key_hash(key, *n, &ascii);
    if (!ascii) return NULL;
    route_entry *entry = table_slot(t, hash, key, *n);
    if (!entry->key) entry->hash = hash;  // for #remember, which fills it
    return entry;
}

// table.remember(env, response, series): the series of the requests keyed as this one from now
// on (until Breakdown's series change). Ruby calls it after naming the request's route itself.
// Past MAX_ENTRIES keys, or for a request C cannot key, nothing is kept.
static VALUE table_remember(VALUE self, VALUE env, VALUE response, VALUE series) {
    route_table *t = table_of(self);
    series_of(series);
    table_forget_stale(t);
    t->rails_loaded = rb_const_defined_at(rb_cObject, id_ActionDispatch);
    t->sinatra_loaded = rb_const_defined_at(rb_cObject, id_Sinatra);
    if (!t->slots) t->slots = ZALLOC_N(route_entry, TABLE_SLOTS);
    char key[MAX_LABEL];
    long n;
    VALUE owner;
    route_entry *entry = request_slot(t, env, response, key, &n, &owner);
    if (!entry) return Qfalse;
    if (!entry->key) {
        // Counted after request_slot: Rails' action_name is Ruby, another thread may have added keys meanwhile.
        if (t->count >= MAX_ENTRIES) return Qfalse;
        t->count++;
        RB_OBJ_WRITE(self, &entry->key, rb_obj_freeze(rb_str_new(key, n)));
        RB_OBJ_WRITE(self, &entry->owner, owner);
    }
    RB_OBJ_WRITE(self, &entry->series, series);
    return Qtrue;
}

// The series of the request's route, if the table knows the route; else NULL.
static series *known_route(route_table *t, VALUE env, VALUE response) {
    table_forget_stale(t);
    if (!t->count) return NULL;
    char key[MAX_LABEL];
    long n;
    VALUE owner;
    route_entry *entry = request_slot(t, env, response, key, &n, &owner);
    return entry && entry->key ? RTYPEDDATA_DATA(entry->series) : NULL;  // a BreakdownSeries: #remember checked
}

// requests.finish(timing, env, response) -> the response when all is done (the timing finished, the
// route recorded, the header added if asked); false when the route is Ruby's to name (a route
// function, or a label not known here yet): only the timing is finished; nil when the route is
// recorded (or not asked for) and the header added if it could be, but Ruby has more to do: the
// header when the response would not take it here (frozen, an Array value already there), or the
// middleware's work after the response (a slow-request log, the flight recorder, the callbacks).
static VALUE table_finish(VALUE self, VALUE timing, VALUE env, VALUE response) {
    route_table *t = table_of(self);
    uint64_t values[GVLS_REQUEST_VALUES];
    gvls_request_timing_finish_values(timing, values);
    if (t->routes == ROUTES_BUILT_IN) {
        series *s = known_route(t, env, response);
        if (!s) return Qfalse;
        add(s, values, t->sample_rate);
    } else if (t->routes == ROUTES_IN_RUBY) {
        return Qfalse;
    }
    VALUE done = gvls_request_timing_respond(timing, response, t->add_header);
    return t->after_response || request_callbacks ? Qnil : done;
}

static VALUE native_set_request_callbacks(VALUE self, VALUE on) {
    request_callbacks = RTEST(on);
    return on;
}

// RackRequests.forget_all: Breakdown's series changed (reset, fork, caps); every table starts over.
static VALUE table_forget_all(VALUE klass) {
    breakdown_generation++;
    return Qnil;
}

// The interned String: the very object a Rack server's frozen literal key is, so the Hash
// compares keys by identity.
static VALUE frozen_key(const char *name) {
    VALUE key = rb_str_to_interned_str(rb_utf8_str_new_cstr(name));
    rb_gc_register_mark_object(key);
    return key;
}

void gvls_breakdown_init(VALUE mNative) {
    rb_define_singleton_method(mNative, "route_template", route_template, 2);
    rb_define_singleton_method(mNative, "request_callbacks=", native_set_request_callbacks, 1);
    VALUE cSeries = rb_define_class_under(mNative, "BreakdownSeries", rb_cObject);
    rb_define_alloc_func(cSeries, series_alloc);
    rb_define_method(cSeries, "add", series_add, 2);
    rb_define_method(cSeries, "to_a", series_to_a, 0);
    VALUE fields = rb_ary_new_capa(SUMS + 1);
    rb_ary_push(fields, ID2SYM(rb_intern("count")));
    for (int i = 0; i < GVLS_REQUEST_VALUES; i++) rb_ary_push(fields, ID2SYM(value_ids[i] = rb_intern(value_names[i])));
    rb_ary_push(fields, ID2SYM(rb_intern("sample_rate")));
    rb_define_const(cSeries, "FIELDS", rb_obj_freeze(fields));

    VALUE cTable = rb_define_class_under(mNative, "RackRequests", rb_cObject);
    rb_define_alloc_func(cTable, table_alloc);
    rb_define_method(cTable, "initialize", table_initialize, 4);
    rb_define_method(cTable, "start", table_start, 1);
    rb_define_method(cTable, "remember", table_remember, 3);
    rb_define_method(cTable, "finish", table_finish, 3);
    rb_define_singleton_method(cTable, "forget_all", table_forget_all, 0);
    key_rails = frozen_key("action_dispatch.request.path_parameters");
    key_controller = frozen_key("action_controller.instance");
    sym_controller = ID2SYM(rb_intern("controller"));
    sym_action = ID2SYM(rb_intern("action"));
    id_action_name = rb_intern("action_name");
    key_sinatra = frozen_key("sinatra.route");
    key_env = frozen_key("gvlscope");
    id_built_in = rb_intern("built_in");
    id_ruby = rb_intern("ruby");
    id_off = rb_intern("off");
    key_method = frozen_key("REQUEST_METHOD");
    key_script_name = frozen_key("SCRIPT_NAME");
    key_path_info = frozen_key("PATH_INFO");
    id_ActionDispatch = rb_intern("ActionDispatch");
    id_Sinatra = rb_intern("Sinatra");
}
