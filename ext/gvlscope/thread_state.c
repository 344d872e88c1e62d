// Per-thread state: one slot per Ruby thread, reached through one thread-specific storage key.
#include "thread_state.h"
#include "cruby_layout.h"
#include "format.h"
#include <ruby/debug.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static rb_internal_thread_specific_key_t slot_key;
static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static gvls_thread **registry;
static size_t registry_len, registry_capa;
static uint32_t next_serial = 1;
// Slot indexes (gvls_thread.index): the next never used, and those of freed slots, to reuse.
static uint32_t next_index;
static uint32_t *free_indexes;
static size_t free_indexes_len, free_indexes_capa;
static VALUE registry_holder;       // marks registered threads until released, and what was read of them
static VALUE empty_string;          // a released thread's name or site when it had none
// Exited threads whose Thread is still marked: pushed by EXITED hooks (any native thread, without
// the GVL: a lock-free stack), taken whole by the release.
static gvls_thread *_Atomic exited_list;
static _Atomic int release_wanted;  // the exited list may hold slots: slow lookups ask for the job
static rb_postponed_job_handle_t release_job = POSTPONED_JOB_HANDLE_INVALID;
static int release_paused;          // with the GVL: Thread VALUEs copied out are in use
static int hook_on, table_open;     // with the GVL: gvls_threads_hook_on, gvls_threads_table_open

// Registered at Init, read-only after: the hook's slow path reads them without a lock.
static const gvls_slot_listener *listeners[GVLS_SLOT_LISTENERS];
static int listener_count;

void gvls_threads_listen(const gvls_slot_listener *listener) {
    if (listener_count == GVLS_SLOT_LISTENERS) rb_bug("gvlscope: more than %d slot listeners", GVLS_SLOT_LISTENERS);
    listeners[listener_count++] = listener;
}

void gvls_threads_hook_on(int on) {
    hook_on = on;
}

void gvls_threads_table_open(int open) {
    table_open = open;
}

// Under the registry lock.
static int kept_by_listener(const gvls_thread *slot) {
    for (int i = 0; i < listener_count; i++) {
        if (listeners[i]->keeps && listeners[i]->keeps(slot)) return 1;
    }
    return 0;
}

// The Ractor of a thread, read from CRuby's rb_thread_t without calling Ruby (the hook may not),
// where cruby_layout.h knows this Ruby's layout. Init also checks it against the main thread (self
// must match, id must be 1); on a Ruby outside the table, or if the check fails, Ractor ids are
// reported as 0: all threads as one Ractor.
static int ractor_layout_ok;
static VALUE main_ractor_main_thread;  // rb_thread_main() gives the main thread of the caller's Ractor

static uint32_t ractor_id_of(VALUE thread) {
    if (!ractor_layout_ok) return 0;
    const struct gvls_cruby_thread_prefix *th = RTYPEDDATA_DATA(thread);
    if (!th || th->self != thread || !th->ractor) return 0;
    gvls_cruby_ractor_id id = ((const struct gvls_cruby_ractor_prefix *)th->ractor)->id;
    return id <= UINT32_MAX ? (uint32_t)id : UINT32_MAX;  // 4.1's 64-bit ids: 2^32 Ractors is far off
}

int gvls_on_main_ractor(void) {
    if (ractor_layout_ok) return ractor_id_of(rb_thread_current()) == 1;
    return rb_thread_main() == main_ractor_main_thread;
}

// Where the thread was created, as Thread#inspect shows it: "#<Thread:0x...[@name] app.rb:12 run>"
// gives "app.rb:12"; nil for the main thread and threads not made from a block.
static VALUE created_at(VALUE thread, VALUE name) {
    VALUE inspect = rb_inspect(thread);
    const char *p = RSTRING_PTR(inspect), *end = p + RSTRING_LEN(inspect);
    static const char prefix[] = "#<Thread:";
    if (RSTRING_LEN(inspect) < (long)sizeof(prefix) || memcmp(p, prefix, sizeof(prefix) - 1) != 0) return Qnil;
    p += sizeof(prefix) - 1;
    while (p < end && *p != ' ' && *p != '@') p++;   // the address
    if (p < end && *p == '@') p += 1 + RSTRING_LEN(name);  // the name, which may hold spaces
    if (p >= end || *p != ' ') return Qnil;
    const char *start = p + 1, *last = end - 1;     // drop " status>"
    while (last > start && *last != ' ') last--;
    if (last <= start || memchr(start, ':', (size_t)(last - start)) == NULL) return Qnil;
    return rb_str_new(start, last - start);
}

typedef struct { VALUE thread, name, site; int with_site; } label_read;

static VALUE read_label(VALUE arg) {
    label_read *read = (label_read *)arg;
    VALUE name = rb_funcall(read->thread, rb_intern("name"), 0);
    if (RB_TYPE_P(name, T_STRING)) read->name = name;
    if (read->with_site) read->site = created_at(read->thread, read->name);
    return Qnil;
}

// Native.thread_created_at(thread): where a live thread was created ("app.rb:12"), or nil; the
// live metrics label unnamed threads with it as a trace does.
static VALUE thread_created_at(VALUE self, VALUE thread) {
    if (!rb_obj_is_kind_of(thread, rb_cThread)) rb_raise(rb_eTypeError, "not a Thread");
    label_read read = { thread, empty_string, Qnil, 1 };
    read_label((VALUE)&read);
    return read.site;
}

void gvls_thread_state_define(VALUE mNative) {
    rb_define_singleton_method(mNative, "thread_created_at", thread_created_at, 1);
}

void gvls_thread_label(const gvls_thread_ref *ref, int with_site, VALUE *name, VALUE *site) {
    if (ref->thread == Qfalse) {  // released: what was read then
        *name = ref->name;
        *site = ref->created_at;
        return;
    }
    label_read read = { ref->thread, empty_string, empty_string, with_site };
    // Thread#name and #inspect are C methods that check no interrupts; only a redefinition in
    // Ruby could raise, and a thread's record (or a postponed job) must not fail for it.
    int state = 0;
    rb_protect(read_label, (VALUE)&read, &state);
    if (state) rb_set_errinfo(Qnil);
    *name = read.name;
    *site = NIL_P(read.site) ? empty_string : read.site;
}

gvls_thread_ref gvls_thread_ref_of(const gvls_thread *slot) {
    return (gvls_thread_ref){ slot->thread, slot->name, slot->created_at, slot->serial, slot->ractor_id, atomic_load(&slot->exited) };
}

void gvls_thread_exited(gvls_thread *slot) {
    // Queued before exited is published: a prune that sees exited leaves a queued slot alone, so
    // the slot is still there when it is pushed below.
    int queued_already = atomic_exchange_explicit(&slot->release_queued, 1, memory_order_relaxed);  // a second EXITED
    atomic_store_explicit(&slot->exited, 1, memory_order_release);
    if (queued_already) return;
    gvls_thread *head = atomic_load_explicit(&exited_list, memory_order_relaxed);
    do {
        slot->next_exited = head;
    } while (!atomic_compare_exchange_weak_explicit(&exited_list, &head, slot, memory_order_release, memory_order_relaxed));
    atomic_store_explicit(&release_wanted, 1, memory_order_relaxed);
    // Every native thread's next event looks its thread up the slow way, which triggers the job
    // again: this trigger goes to the execution context of the thread running the hook, which
    // may be the dying one.
    atomic_fetch_add_explicit(&gvls_registry_generation, 1, memory_order_relaxed);
    if (release_job != POSTPONED_JOB_HANDLE_INVALID) rb_postponed_job_trigger(release_job);
}

void gvls_threads_release_pause(int paused) {
    release_paused += paused ? 1 : -1;
}

void gvls_threads_release_exited(void) {
    if (release_paused || !gvls_on_main_ractor()) return;  // the job runs again at the next slow lookup
    atomic_store_explicit(&release_wanted, 0, memory_order_relaxed);
    gvls_thread *list = atomic_exchange_explicit(&exited_list, NULL, memory_order_acquire);
    // The site only while a trace will write its thread table (it may be stopping: a job can run
    // in stop's wait for the drain thread): metrics show names only, and a trace started later
    // has no event of a thread that exited before it.
    int with_site = table_open;
    for (gvls_thread *slot = list, *next; slot; slot = next) {
        next = slot->next_exited;
        // The slot stays in the registry (nothing frees a queued slot), so its Thread stays
        // marked while Ruby runs here.
        VALUE name = Qfalse, site = Qfalse;
        gvls_thread_ref ref = gvls_thread_ref_of(slot);
        if (ref.thread != Qfalse) gvls_thread_label(&ref, with_site, &name, &site);
        pthread_mutex_lock(&registry_lock);
        if (slot->thread != Qfalse) {
            slot->name = name;
            slot->created_at = site;
            // A later lookup of this Thread (kept by a RequestTiming, say) finds nothing: the slot
            // no longer knows whether the Thread is alive, so pruning could not clear it.
            rb_internal_thread_specific_set(slot->thread, slot_key, NULL);
            slot->thread = Qfalse;
        }
        atomic_store(&slot->release_queued, 0);
        pthread_mutex_unlock(&registry_lock);
        RB_GC_GUARD(name);
        RB_GC_GUARD(site);
    }
    // No cache may map a Thread address to a released slot once that Thread can be collected
    // and its address given to a new Thread (EXITED bumped it too; this costs nothing more).
    if (list) atomic_fetch_add(&gvls_registry_generation, 1);
}

static void release_job_run(void *unused) {
    gvls_threads_release_exited();
}

static void registry_mark(void *unused) {
    pthread_mutex_lock(&registry_lock);
    for (size_t i = 0; i < registry_len; i++) {
        gvls_thread *slot = registry[i];
        rb_gc_mark(slot->thread);  // Qfalse once released: nothing to mark
        rb_gc_mark(slot->name);
        rb_gc_mark(slot->created_at);
    }
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
    empty_string = rb_obj_freeze(rb_str_new(0, 0));
    rb_gc_register_mark_object(empty_string);
    // Preregistered once: triggering is then safe from the hook (3.3+). Invalid (CRuby's job table
    // full): exited threads are released only when a snapshot, start or stop runs.
    release_job = rb_postponed_job_preregister(0, release_job_run, NULL);

    VALUE main_thread = main_ractor_main_thread = rb_thread_main();
    const struct gvls_cruby_thread_prefix *th = RTYPEDDATA_DATA(main_thread);
    ractor_layout_ok = GVLS_CRUBY_LAYOUT_KNOWN && th && th->self == main_thread && th->ractor &&
                       ((const struct gvls_cruby_ractor_prefix *)th->ractor)->id == 1;
}

int gvls_ractor_ids_known(void) {
    return ractor_layout_ok;
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
        slot->index = free_indexes_len ? free_indexes[--free_indexes_len] : next_index++;
        slot->thread = thread;
        slot->ractor_id = ractor_id_of(thread);
        registry[registry_len++] = slot;
        rb_internal_thread_specific_set(thread, slot_key, slot);
        // Listeners: the file sink writes its record soon, not only at stop.
        for (int i = 0; i < listener_count; i++) if (listeners[i]->created) listeners[i]->created(slot);
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

void gvls_threads_release_poke(void) {
    if (__builtin_expect(atomic_load_explicit(&release_wanted, memory_order_relaxed), 0) && release_job != POSTPONED_JOB_HANDLE_INVALID) {
        rb_postponed_job_trigger(release_job);
    }
}

gvls_thread *gvls_thread_lookup(VALUE thread) {
    // The slow path, taken by every native thread after each EXITED (it bumps the generation):
    // the job triggered at EXITED may have gone to the dying thread's execution context, where it
    // waits for the next trigger; this one goes to a live thread's.
    gvls_threads_release_poke();
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

size_t gvls_threads_marked_count(void) {
    pthread_mutex_lock(&registry_lock);
    size_t marked = 0;
    for (size_t i = 0; i < registry_len; i++) marked += registry[i]->thread != Qfalse;
    pthread_mutex_unlock(&registry_lock);
    return marked;
}

// Under the registry lock. Without room to remember it, the index is not reused (new slots get new ones).
static void free_index(uint32_t index) {
    if (free_indexes_len == free_indexes_capa) {
        size_t capa = free_indexes_capa ? free_indexes_capa * 2 : 64;
        uint32_t *grown = realloc(free_indexes, capa * sizeof(*grown));
        if (!grown) return;
        free_indexes = grown;
        free_indexes_capa = capa;
    }
    free_indexes[free_indexes_len++] = index;
}

void gvls_threads_prune_exited(void) {
    pthread_mutex_lock(&registry_lock);
    size_t kept = 0;
    for (size_t i = 0; i < registry_len; i++) {
        // An exited thread fires no more events; its metrics, if collected, were retired first,
        // and a trace that records still lists it (their listeners keep it).
        gvls_thread *slot = registry[i];
        // Queued for release: the exited list still points to it.
        if (atomic_load_explicit(&slot->exited, memory_order_acquire) && !atomic_load(&slot->release_queued) &&
            !kept_by_listener(slot)) {
            // The Thread object may outlive its slot (a RequestTiming, a caller of metrics_thread
            // holds it): a later lookup must find nothing, not freed memory. A released slot's
            // Thread had its storage cleared then, and may be gone by now.
            if (slot->thread != Qfalse) rb_internal_thread_specific_set(slot->thread, slot_key, NULL);
            for (int k = 0; k < listener_count; k++) if (listeners[k]->freed) listeners[k]->freed(slot);
            free_index(slot->index);
            gvls_slot_free(slot);
        } else {
            registry[kept++] = slot;
        }
    }
    if (kept != registry_len) atomic_fetch_add(&gvls_registry_generation, 1);  // before any Thread can be reused
    registry_len = kept;
    pthread_mutex_unlock(&registry_lock);
}

// Threads that died while the hook was off never fired EXITED: their slots (and, marked by the
// registry, their Thread objects with their stacks) stayed forever, one per thread that ever called
// GVLScope.measure. Only while no hook can run and no trace's thread table needs them: a thread
// is dead for Thread#alive? before its EXITED hook has run, so with the hook on this could free a
// slot under it. Thread#alive? is called without the lock (GC marking takes it); it is a C method
// that neither allocates nor switches threads, and slots are freed only with the GVL of the main
// Ractor, which the caller holds: the copied pointers stay valid.
void gvls_threads_prune_dead(void) {
    if (table_open || hook_on) return;  // a trace's thread table needs them; a hook may be inside
    gvls_threads_release_exited();
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
            for (int k = 0; k < listener_count; k++) if (listeners[k]->died_unseen) listeners[k]->died_unseen(slots[i]);
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
// and a hook that was writing a slot's metrics never finishes (its sequence stays odd); nor one
// that was queuing its slot on the exited list: the list is dropped, and its slots (Thread still
// marked) are pruned as threads that died unseen are.
void gvls_thread_state_after_fork(void) {
    pthread_mutex_init(&registry_lock, NULL);
    atomic_store(&exited_list, NULL);
    atomic_store(&release_wanted, 0);
    release_paused = 0;
    for (size_t i = 0; i < registry_len; i++) {
        atomic_store(&registry[i]->metrics_seq, (atomic_load(&registry[i]->metrics_seq) + 1) & ~1u);
        atomic_store(&registry[i]->release_queued, 0);
    }
    atomic_fetch_add(&gvls_registry_generation, 1);
}
