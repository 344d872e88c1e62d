#ifndef GVLSCOPE_THREAD_STATE_H
#define GVLSCOPE_THREAD_STATE_H

#include "gvlscope.h"
#include <stdint.h>

// What gvlscope keeps for one Ruby thread. Found from the hook through the one thread-specific
// storage key (a process has only 8 keys, shared by every gem). Created lazily on the first event
// for a thread, whichever native thread reports it; kept in the registry until the thread has
// exited and no trace needs it any more.
typedef struct gvls_thread {
    uint32_t serial;        // 1, 2, ...: the id in trace records (0 is never used)
    uint32_t ractor_id;     // 1 = main Ractor; 0 = unknown
    VALUE thread;           // the Thread, marked by the registry so its name can be read later
    int exited;             // EXITED seen
} gvls_thread;

void gvls_thread_state_init(void);
gvls_thread *gvls_thread_for(VALUE thread);
// Calls fn for each thread in the registry, under the registry lock (fn must not call Ruby
// code that can run hooks of ours that take the lock; reading names is fine).
void gvls_threads_each(void (*fn)(gvls_thread *, void *), void *arg);
// Forgets threads that have exited: after a trace wrote their names, nothing needs them.
void gvls_threads_prune_exited(void);

#endif
