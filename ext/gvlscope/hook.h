#ifndef GVLSCOPE_HOOK_H
#define GVLSCOPE_HOOK_H

#include "gvlscope.h"
#include "format.h"

// The GVL event as one of format.h's kinds (GVLS_EV_STARTED..GVLS_EV_EXITED), or 0 if not ours.
static inline unsigned gvls_kind_of(rb_event_flag_t event) {
    switch (event) {
      case RUBY_INTERNAL_THREAD_EVENT_STARTED:   return GVLS_EV_STARTED;
      case RUBY_INTERNAL_THREAD_EVENT_READY:     return GVLS_EV_READY;
      case RUBY_INTERNAL_THREAD_EVENT_RESUMED:   return GVLS_EV_RESUMED;
      case RUBY_INTERNAL_THREAD_EVENT_SUSPENDED: return GVLS_EV_SUSPENDED;
      case RUBY_INTERNAL_THREAD_EVENT_EXITED:    return GVLS_EV_EXITED;
      default: return 0;
    }
}

void gvls_hook_init(void);
// Installs the GVL event hook and the GC tracepoint (idempotent).
void gvls_hook_install(void);
// Removes them (idempotent). On return no callback is running: removal waits for those in flight.
void gvls_hook_remove(void);
// Installs or removes the hook so it runs exactly while a consumer (trace or metrics) is on.
void gvls_hook_sync(void);

// Test-only, set by debug.c (which the hook must not call: nothing uses the test-only file): when
// set, EXITED calls it before the slot is marked exited, so a concurrent snapshot has time to find it.
struct gvls_thread;
extern void (*gvls_hook_exited_test)(struct gvls_thread *slot);

#endif
