// A record's field names (an X-macro list's: metrics.h, request_timing.h, fibers.h) as the frozen
// Array of Symbols Ruby builds its Struct from: one declaration per record, in C, named for Ruby.
// A header of its own: the files that export names use nothing else of each other's for it.
#ifndef GVLSCOPE_RECORD_NAMES_H
#define GVLSCOPE_RECORD_NAMES_H

#include <ruby.h>

static inline VALUE gvls_symbols(const char *const *names, long count) {
    VALUE symbols = rb_ary_new_capa(count);
    for (long i = 0; i < count; i++) rb_ary_push(symbols, ID2SYM(rb_intern(names[i])));
    return rb_ary_freeze(symbols);
}

#endif
