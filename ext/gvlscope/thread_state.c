// Per-thread state: one slot per Ruby thread, reached through one thread-specific storage key.
#include "thread_state.h"
#include "format.h"
#include "metrics.h"
#include "trace.h"
#include "trace_session.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static rb_internal_thread_specific_key_t slot_key;
static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static gvls_thread **registry;
static size_t registry_len, registry_capa;
static uint32_t next_serial = 1;
static VALUE registry_holder;       // marks registered threads: their names are read at stop

// The Ractor of a thread, read from CRuby's rb_thread_t without calling Ruby (the hook may not).
// Its first fields have been { list node (2 pointers), VALUE self, rb_ractor_t *ractor, ... } since
// 3.0, and rb_ractor_t starts with { VALUE self, uint32_t id }. Init checks the layout against the
// main thread (self must match, id must be 1); if it does not hold, ractor ids are reported as 0.
struct cruby_thread_prefix { void *list_prev, *list_next; VALUE self; const void *ractor; };
struct cruby_ractor_prefix { VALUE self; uint32_t id; };
static int ractor_layout_ok;

static uint32_t ractor_id_of(VALUE thread) {
    if (!ractor_layout_ok) return 0;
    const struct cruby_thread_prefix *th = RTYPEDDATA_DATA(thread);
    if (!th || th->self != thread || !th->ractor) return 0;
    return ((const struct cruby_ractor_prefix *)th->ractor)->id;
}

static void registry_mark(void *unused) {
    pthread_mutex_lock(&registry_lock);
    for (size_t i = 0; i < registry_len; i++) rb_gc_mark(registry[i]->thread);
    pthread_mutex_unlock(&registry_lock);
}

static const rb_data_type_t registry_type = {
    .wrap_struct_name = "gvlscope/thread_registry",
    .function = { .dmark = registry_mark },
    .flags = RUBY_TYPED_FREE_IMMEDIATELY,
};

void gvls_thread_state_init(void) {
    // Only key we ever create: must happen in Init, while the main Ractor is the only one.
    slot_key = rb_internal_thread_specific_key_create();
    // A non-NULL data pointer: CRuby skips the mark function of a T_DATA whose pointer is NULL,
    // and then dead Thread objects in the registry would be collected under us.
    registry_holder = TypedData_Wrap_Struct(0, &registry_type, &registry);
    rb_gc_register_mark_object(registry_holder);

    VALUE main_thread = rb_thread_main();
    const struct cruby_thread_prefix *th = RTYPEDDATA_DATA(main_thread);
    ractor_layout_ok = th && th->self == main_thread && th->ractor &&
                       ((const struct cruby_ractor_prefix *)th->ractor)->id == 1;
}

// The slow path: first event for this thread. Two native threads may race here (a waker's READY
// and the subject's own event), so the check is repeated under the lock.
static gvls_thread *create_slot(VALUE thread) {
    pthread_mutex_lock(&registry_lock);
    gvls_thread *slot = rb_internal_thread_specific_get(thread, slot_key);
    if (!slot && (slot = calloc(1, sizeof(*slot)))) {
        if (registry_len == registry_capa) {
            size_t capa = registry_capa ? registry_capa * 2 : 64;
            gvls_thread **grown = realloc(registry, capa * sizeof(*grown));
            if (!grown) { free(slot); slot = NULL; goto out; }
            registry = grown;
            registry_capa = capa;
        }
        slot->serial = next_serial <= GVLS_MAX_THREAD_SERIAL ? next_serial++ : GVLS_MAX_THREAD_SERIAL;
        slot->thread = thread;
        slot->ractor_id = ractor_id_of(thread);
        registry[registry_len++] = slot;
        rb_internal_thread_specific_set(thread, slot_key, slot);
        gvls_file_sink_thread_appeared();  // its record reaches the file soon, not only at stop
    }
out:
    pthread_mutex_unlock(&registry_lock);
    return slot;
}

__thread __attribute__((tls_model("initial-exec"))) gvls_last_thread gvls_last;
_Atomic uint32_t gvls_registry_generation = 1;

gvls_thread *gvls_thread_find(VALUE thread) {
    return rb_internal_thread_specific_get(thread, slot_key);
}

gvls_thread *gvls_thread_lookup(VALUE thread) {
    gvls_thread *slot = rb_internal_thread_specific_get(thread, slot_key);
    return slot ? slot : create_slot(thread);
}

void gvls_threads_each(void (*fn)(gvls_thread *, void *), void *arg) {
    pthread_mutex_lock(&registry_lock);
    for (size_t i = 0; i < registry_len; i++) fn(registry[i], arg);
    pthread_mutex_unlock(&registry_lock);
}

size_t gvls_threads_each_from(size_t from, void (*fn)(gvls_thread *, void *), void *arg) {
    pthread_mutex_lock(&registry_lock);
    for (size_t i = from; i < registry_len; i++) fn(registry[i], arg);
    size_t len = registry_len;
    pthread_mutex_unlock(&registry_lock);
    return len;
}

int gvls_debug_quarantine;  // debug.c: freed slots are poisoned and kept, to catch late writes

void gvls_slot_free(gvls_thread *slot) {
    if (__builtin_expect(gvls_debug_quarantine, 0)) { slot->serial = 0; return; }  // 0: never a live serial
    free(slot);
}

size_t gvls_threads_count(void) {
    pthread_mutex_lock(&registry_lock);
    size_t len = registry_len;
    pthread_mutex_unlock(&registry_lock);
    return len;
}

void gvls_threads_prune_exited(void) {
    if (atomic_load(&gvls_current_trace.active)) return;  // the trace's thread table still needs them
    pthread_mutex_lock(&registry_lock);
    size_t kept = 0;
    for (size_t i = 0; i < registry_len; i++) {
        // An exited thread fires no more events; its metrics, if collected, were retired first.
        if (atomic_load_explicit(&registry[i]->exited, memory_order_acquire) && (registry[i]->retired || !atomic_load(&gvls_metrics.enabled))) {
            // The Thread object may outlive its slot (a RequestTiming, a caller of metrics_thread
            // holds it): a later lookup must find nothing, not freed memory.
            rb_internal_thread_specific_set(registry[i]->thread, slot_key, NULL);
            gvls_slot_free(registry[i]);
        } else {
            registry[kept++] = registry[i];
        }
    }
    if (kept != registry_len) atomic_fetch_add(&gvls_registry_generation, 1);  // before any Thread can be reused
    registry_len = kept;
    pthread_mutex_unlock(&registry_lock);
}

// Threads that died while the hook was off never fired EXITED: their slots (and, marked by the
// registry, their Thread objects with their stacks) stayed forever, one per thread that ever called
// GVLScope.measure. Only while no hook can run (see gvls_session_prune_dead_threads): a thread
// is dead for Thread#alive? before its EXITED hook has run, so with the hook on this could free a
// slot under it. Thread#alive? is called without the lock (GC marking takes it); it is a C method
// that neither allocates nor switches threads, and slots are freed only with the GVL of the main
// Ractor, which the caller holds: the copied pointers stay valid.
void gvls_threads_prune_dead(void) {
    pthread_mutex_lock(&registry_lock);
    size_t len = registry_len;
    gvls_thread **slots = len ? malloc(len * sizeof(*slots)) : NULL;
    if (slots) memcpy(slots, registry, len * sizeof(*slots));
    pthread_mutex_unlock(&registry_lock);
    if (!slots) return;
    ID id_alive = rb_intern("alive?");
    for (size_t i = 0; i < len; i++) {
        if (!atomic_load(&slots[i]->exited) && !RTEST(rb_funcall(slots[i]->thread, id_alive, 0))) {
            atomic_store(&slots[i]->exited, 1);
            slots[i]->metrics.state = GVLS_STATE_EXITED;
        }
    }
    free(slots);
    gvls_threads_prune_exited();
}

__thread __attribute__((tls_model("initial-exec"))) uint32_t gvls_tls_native_serial;
static _Atomic uint32_t next_native_serial_global = 1;

uint32_t gvls_assign_native_serial(void) {
    return gvls_tls_native_serial = atomic_fetch_add(&next_native_serial_global, 1);
}

// In a forked child only the forking thread survives: a lock another thread held is held forever,
// and a hook that was writing a slot's metrics never finishes (its sequence stays odd).
void gvls_thread_state_after_fork(void) {
    pthread_mutex_init(&registry_lock, NULL);
    for (size_t i = 0; i < registry_len; i++) {
        atomic_store(&registry[i]->metrics_seq, (atomic_load(&registry[i]->metrics_seq) + 1) & ~1u);
    }
    atomic_fetch_add(&gvls_registry_generation, 1);
}
