#ifndef GVLSCOPE_CRUBY_LAYOUT_H
#define GVLSCOPE_CRUBY_LAYOUT_H

// The CRuby internals gvlscope reads without calling Ruby (thread_state.c: a thread's Ractor id,
// which the hook may not ask Ruby for), per CRuby version. CRuby installs no internal headers, so
// this is a table: script/check-ruby-headers compiles these prefixes beside the real structs of
// every version in datadog-ruby_core_source and fails if an offset or width differs. A version
// outside the table reads nothing (GVLS_CRUBY_LAYOUT_KNOWN 0): every thread's Ractor id is 0.
//
//   rb_thread_t  starts { struct ccan_list_node lt_node; VALUE self; rb_ractor_t *ractor; ... }  (3.0 .. 4.1)
//   rb_ractor_t  starts { struct rb_ractor_pub { VALUE self; <id>; ... } }: id is uint32_t up to
//                4.0.x, rb_serial_t (64 bits) from 4.1.
#include <ruby/ruby.h>
#include <ruby/version.h>
#include <stdint.h>

#define GVLS_RUBY_API(major, minor) ((major) * 100 + (minor))
#ifndef GVLS_LAYOUT_FOR_API  // script/check-ruby-headers sets it to the version whose headers it checks
#define GVLS_LAYOUT_FOR_API GVLS_RUBY_API(RUBY_API_VERSION_MAJOR, RUBY_API_VERSION_MINOR)
#endif

#if GVLS_LAYOUT_FOR_API >= GVLS_RUBY_API(3, 3) && GVLS_LAYOUT_FOR_API <= GVLS_RUBY_API(4, 0)
#define GVLS_CRUBY_LAYOUT_KNOWN 1
typedef uint32_t gvls_cruby_ractor_id;
#elif GVLS_LAYOUT_FOR_API == GVLS_RUBY_API(4, 1)
#define GVLS_CRUBY_LAYOUT_KNOWN 1
typedef uint64_t gvls_cruby_ractor_id;  // rb_serial_t
#else
#define GVLS_CRUBY_LAYOUT_KNOWN 0  // a Ruby newer than the table: nothing is read
typedef uint32_t gvls_cruby_ractor_id;
#endif

struct gvls_cruby_thread_prefix { void *list_prev, *list_next; VALUE self; const void *ractor; };
struct gvls_cruby_ractor_prefix { VALUE self; gvls_cruby_ractor_id id; };

#endif
