// Hand-offs: the wait a request or job met before it reached the code that times it. A Puma
// request reaches a pool thread from one of three threads, each through ThreadPool#<<: the server
// thread (a new connection: IO.select woke, the thread waited for the GVL, accepted), the reactor
// (a keep-alive connection's next request, or a slow first one: NIO's select woke, the thread
// waited for the GVL, read it) or a pool thread whose connection had a next request buffered and
// no thread free to keep it. The pool thread that takes it wakes and waits for the GVL again before
// the app starts. A Sidekiq processor's fetch returns a job, then waits behind the job logger's
// lock and log write before the middleware runs. The client saw all of it. Each hand-off stamps
// what it knows (when the work arrived, the thread's GVL wait since) and the thread that starts
// the request or job takes the stamp (its ticket) into its RequestTiming's pickup wait.
//
// All of this runs in Ruby methods with the GVL held, on the main Ractor's threads: the GVL orders
// a stamp and its claim, so the table needs no lock.
#include "gvlscope.h"
#include "handoff.h"
#include "clock.h"
#include "metrics.h"
#include "metrics_event.h"
#include <ruby/io.h>
#include <stdlib.h>
#include <string.h>
#include "thread_state.h"

// Each thread's ticket, by its slot's index: handoff.c's, not a field of the slot (the thread
// state is below its consumers). Only main-Ractor threads' (current_slot), with the GVL.
static gvls_handoff *tickets;
static size_t tickets_capa;

// The slot's ticket; NULL if it has none yet and grow is 0, or if there is no memory for it.
static gvls_handoff *ticket_of(const gvls_thread *slot, int grow) {
    if (slot->index < tickets_capa) return &tickets[slot->index];
    if (!grow) return NULL;
    size_t capa = tickets_capa ? tickets_capa : 64;
    while (capa <= slot->index) capa *= 2;
    gvls_handoff *grown = realloc(tickets, capa * sizeof(*grown));
    if (!grown) return NULL;
    memset(grown + tickets_capa, 0, (capa - tickets_capa) * sizeof(*grown));
    tickets = grown;
    tickets_capa = capa;
    return &tickets[slot->index];
}

int gvls_handoff_take(const gvls_thread *slot, gvls_handoff *out) {
    gvls_handoff *ticket = ticket_of(slot, 0);
    if (!ticket || !ticket->set) return 0;
    *out = *ticket;
    ticket->set = 0;
    return 1;
}

// A freed slot's index goes to a new thread, which was handed nothing.
static void slot_freed(gvls_thread *slot) {
    gvls_handoff *ticket = ticket_of(slot, 0);
    if (ticket) ticket->set = 0;
}

static const gvls_slot_listener slot_listener = { .freed = slot_freed };

// A connection handed over, by its file descriptor (a server hands over IO objects; the
// descriptor is what both sides can read without calling Ruby). A newer stamp of the same
// descriptor wins; a stamp whose slot another descriptor took is lost, counted (dropped).
#define HANDOFF_TABLE 4096
typedef struct { int fd; uint64_t arrival_ns, carried_wait_ns, handoff_ns; int exact; } stamp;
static stamp table[HANDOFF_TABLE];
static uint64_t stamps_taken, stamps_overwritten;
// Stamps not yet claimed: a request start looks for its stamp only while some are (a keep-alive
// connection's next request, the common case, pays one load and compare).
uint64_t gvls_handoff_pending;

// This extension is not marked Ractor-safe: its methods run on the main Ractor only, whose GVL
// orders a stamp and its claim.
static gvls_thread *current_slot(void) { return gvls_thread_for(rb_thread_current()); }

// Where a thread's work arrived: when its longest block since its last mark ended (a server's
// select, a job runner's BRPOP read that returned the job; not the calls that returned at once
// around it: a nonblocking read, a log write), and its wait_ns then. Then a new mark: the next
// hand-off's wait starts after this one's. Returns 0 if nothing blocked since the last mark.
static uint64_t arrival_and_mark(gvls_thread *slot, uint64_t *wait_at_arrival) {
    uint64_t arrival_ns = slot->metrics.mark_longest_idle_woke_ns;
    if (wait_at_arrival) *wait_at_arrival = slot->metrics.mark_longest_idle_wait_ns;
    uint32_t seq = gvls_metrics_write_begin(slot);  // this thread's hook writes them too, never meanwhile
    slot->metrics.mark_longest_idle_ns = 0;
    slot->metrics.mark_longest_idle_woke_ns = 0;
    gvls_metrics_write_end(slot, seq);
    return arrival_ns;
}

// When the work handed over now arrived. The kernel knows when a TCP connection's bytes came, to
// a jiffy either way; the thread's wake for them is exact, and began a wait for the GVL (its wait
// log has the wake as that wait's start). The latest wait that began within a jiffy of the
// kernel's time is taken for the wake (an earlier one in that window may be the previous
// request's, or the reactor's wakeup pipe: a few ms too early, and a quick kept-alive request
// would be charged more than its client waited); with none (the thread was busy when they came,
// and its next select returned at once), the kernel's time a jiffy late: a lower bound, never
// more than the client saw. A wake for work the thread did not get (a connection another Puma
// worker accepted, a timeout) is never taken for the arrival, so a wait that ended before the
// request's bytes arrived is never charged to it (lost accepts in cluster mode, a connection
// silent before its first request). Without the kernel's word (a Unix socket): the longest block
// since the thread's last hand-off (a select), else now. *carried_ns: the thread's GVL wait since.
static uint64_t arrival_of(gvls_thread *slot, int fd, uint64_t now_ns, uint64_t *carried_ns, int *exact) {
    uint64_t woke_ns = arrival_and_mark(slot, NULL);
    uint64_t data_ns = gvls_kernel_data_arrival_ns(fd, now_ns);
    if (!data_ns) {
        uint64_t arrival_ns = woke_ns ? woke_ns : now_ns;
        *carried_ns = gvls_metrics_own_wait_since(slot, arrival_ns, now_ns, exact, NULL);
        return arrival_ns;
    }
    uint64_t from_ns = data_ns > GVLS_KERNEL_SLACK_NS ? data_ns - GVLS_KERNEL_SLACK_NS : 0;
    return gvls_metrics_own_arrival(slot, from_ns, data_ns + GVLS_KERNEL_SLACK_NS, now_ns, carried_ns, exact);
}

// On the thread that hands the work over: it arrived at arrival_of, and this thread's GVL wait
// since then is the work's too (read from its wait log: no wait of it is in progress, it runs).
static void stamp_now(int fd) {
    gvls_thread *slot = current_slot();
    if (!slot || fd < 0 || !atomic_load(&gvls_metrics.enabled)) return;
    uint64_t now_ns = gvls_now_ns(), carried_ns;
    int exact;
    uint64_t arrival_ns = arrival_of(slot, fd, now_ns, &carried_ns, &exact);
    stamp *s = &table[fd % HANDOFF_TABLE];
    if (s->handoff_ns && s->fd != fd) stamps_overwritten++;
    if (!s->handoff_ns) gvls_handoff_pending++;
    *s = (stamp){ .fd = fd, .arrival_ns = arrival_ns, .handoff_ns = now_ns, .exact = exact, .carried_wait_ns = carried_ns };
}

// The caller's own idle time: it runs, so no idle is in progress, and no hook writes its slot
// meanwhile (CRuby runs a thread's events on it).
static uint64_t own_idle(const gvls_thread *slot) { return slot->metrics.idle_ns; }

// On the thread that will serve the work, as its request starts (now_ns): the connection's stamp,
// and this thread's own wait from the hand-off on, which counts too. Also drops a ticket an
// earlier connection left (never started: the reactor took it back).
int gvls_handoff_claim(gvls_thread *slot, int fd, uint64_t now_ns, gvls_handoff *out) {
    gvls_handoff *ticket = ticket_of(slot, 0);
    if (ticket) ticket->set = 0;
    // A request starts on this thread: if it hands a connection on later (a next request buffered
    // and no free thread), the arrival is sought from here on, not in its wait for work.
    uint64_t woke_ns = arrival_and_mark(slot, NULL);
    if (fd < 0) return 0;
    stamp *s = &table[fd % HANDOFF_TABLE];
    if (!s->handoff_ns || s->fd != fd) return 0;
    uint64_t wait_now;
    int exact;
    uint64_t since = gvls_metrics_own_wait_since(slot, s->handoff_ns, now_ns, &exact, &wait_now);
    *out = (gvls_handoff){
        .set = 1, .exact = exact && s->exact, .arrival_ns = s->arrival_ns, .carried_wait_ns = s->carried_wait_ns,
        .handoff_ns = s->handoff_ns, .wait_base_ns = wait_now > since ? wait_now - since : 0,
        .idle_base_ns = own_idle(slot), .woke_ns = woke_ns,
    };
    s->handoff_ns = 0;
    gvls_handoff_pending--;
    stamps_taken++;
    return 1;
}

static int fd_of(VALUE io) {
    // Only a real IO: an SSL socket wrapper or a test double has no descriptor we may read safely.
    if (!RB_TYPE_P(io, T_FILE)) return -1;
    // Read directly, not through rb_io_descriptor, which raises for a closed IO (-1 here): this
    // runs inside Puma's methods, which must never see gvlscope raise.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    return RFILE(io)->fptr ? RFILE(io)->fptr->fd : -1;
#pragma GCC diagnostic pop
}

// ---- Puma's todo list, stamping (lib/gvlscope/integrations/handoffs.rb) ---------------------------
// Every request reaches a pool thread through ThreadPool#<<, which pushes it on the pool's todo
// list with `@todo << work` (a Thread::Queue in Puma 7 and 8, an Array in 6). Handoffs gives each
// pool, before its first thread takes the list, one of these, whose << stamps and pushes: a C
// method where a Ruby one prepended to ThreadPool#<< (and its super) cost ~580 instructions a
// request more (bench/routes_instructions.rb).
static ID id_ivar_io, id_push;

// work: a Puma::Client, whose @io is the connection, or the IO itself.
static void stamp_work(VALUE work) {
    stamp_now(fd_of(RB_TYPE_P(work, T_FILE) ? work : rb_attr_get(work, id_ivar_io)));
}

// StampingQueue#<<(work): Thread::Queue#push, whose C function is not public: called by name
// (~170 instructions; rb_call_super looks the method up anew each call, ~270).
static VALUE stamping_queue_push(VALUE self, VALUE work) {
    stamp_work(work);
    return rb_funcallv(self, id_push, 1, &work);
}

// StampingArray#<<(work)
static VALUE stamping_array_push(VALUE self, VALUE work) {
    stamp_work(work);
    return rb_ary_push(self, work);
}

// GVLScope::Rack's request start (breakdown.c), once Handoffs are installed for Puma: the request's
// connection, whose stamp its thread claims, by env["puma.socket"] (Puma 6-8 set it to the
// client's socket): -1 if none. A lookup in the env the middleware has anyway, not another
// prepended method: those cost ~550 instructions a request.
int gvls_handoff_rack = 0;  // and the claim is only looked for while gvls_handoff_pending
static VALUE key_puma_socket;

int gvls_handoff_fd_of_env(VALUE env) {
    if (!RB_TYPE_P(env, T_HASH)) return -1;
    return fd_of(rb_hash_lookup2(env, key_puma_socket, Qnil));
}

// Native.handoff_claim_in_rack = true: Handoffs stamp Puma's connections; GVLScope::Rack claims them.
static VALUE handoff_set_rack(VALUE self, VALUE on) {
    gvls_handoff_rack = RTEST(on);
    return on;
}

// Native.handoff_fetch_begin / handoff_fetch_end(work) around a job runner's fetch (Sidekiq's
// Processor#fetch): the job arrived when the fetch's longest block ended (the BRPOP read that
// returned it; a job that was waiting already: a short one), and the thread's wait from then on
// is the job's. Returns work.
static VALUE handoff_fetch_begin(VALUE self) {
    gvls_thread *slot = current_slot();
    if (slot) arrival_and_mark(slot, NULL);
    return Qnil;
}

static VALUE handoff_fetch_end(VALUE self, VALUE work) {
    gvls_thread *slot = current_slot();
    if (!slot) return work;
    gvls_handoff *ticket = ticket_of(slot, 0);
    if (ticket) ticket->set = 0;
    if (!RTEST(work) || !atomic_load(&gvls_metrics.enabled)) return work;
    uint64_t wait_at_arrival;
    uint64_t arrival_ns = arrival_and_mark(slot, &wait_at_arrival);
    // Nothing blocked in the fetch: no wake to start from (or no memory for the ticket).
    if (!arrival_ns || !(ticket = ticket_of(slot, 1))) return work;
    *ticket = (gvls_handoff){
        .set = 1, .exact = 1, .arrival_ns = arrival_ns, .carried_wait_ns = 0, .handoff_ns = arrival_ns,
        .wait_base_ns = wait_at_arrival, .idle_base_ns = own_idle(slot),
    };
    return work;
}

// Native.handoff_stats -> [stamps taken by a request, stamps lost to another descriptor]
static VALUE handoff_stats(VALUE self) {
    return rb_ary_new_from_args(2, ULL2NUM(stamps_taken), ULL2NUM(stamps_overwritten));
}

// In a forked child (a Puma worker): the parent's connections are not the child's.
void gvls_handoff_after_fork(void) {
    memset(table, 0, sizeof(table));
    gvls_handoff_pending = 0;
}

void gvls_handoff_init(VALUE mNative) {
    gvls_threads_listen(&slot_listener);
    VALUE cQueue = rb_const_get(rb_cThread, rb_intern("Queue"));
    rb_define_method(rb_define_class_under(mNative, "StampingQueue", cQueue), "<<", stamping_queue_push, 1);
    rb_define_method(rb_define_class_under(mNative, "StampingArray", rb_cArray), "<<", stamping_array_push, 1);
    rb_define_singleton_method(mNative, "handoff_fetch_begin", handoff_fetch_begin, 0);
    rb_define_singleton_method(mNative, "handoff_fetch_end", handoff_fetch_end, 1);
    rb_define_singleton_method(mNative, "handoff_stats", handoff_stats, 0);
    rb_define_singleton_method(mNative, "handoff_claim_in_rack=", handoff_set_rack, 1);
    // Interned: the very object Puma's frozen literal key is, so the env Hash compares by identity.
    id_ivar_io = rb_intern("@io");
    id_push = rb_intern("push");
    key_puma_socket = rb_str_to_interned_str(rb_utf8_str_new_cstr("puma.socket"));
    rb_gc_register_mark_object(key_puma_socket);
}
