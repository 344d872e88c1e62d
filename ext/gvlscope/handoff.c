// Hand-offs: the wait a request or job met before it reached the code that times it. A Puma server
// thread wakes in IO.select when a connection arrives, waits for the GVL, accepts and hands the
// connection to a pool thread, which wakes, waits for the GVL again (and takes locks: each a release
// and a wait) before the app starts; a Sidekiq processor's fetch returns a job, then waits behind the
// job logger's lock and log write before the middleware runs. The client saw all of it. Each step
// stamps what it knows (the thread's GVL counters, which the hook keeps) and the thread that starts
// the request or job takes the stamp (slot->ticket) into its RequestTiming's pickup wait.
//
// All of this runs in Ruby methods with the GVL held, on the main Ractor's threads: the GVL orders
// a stamp and its claim, so the table needs no lock.
#include "gvlscope.h"
#include "clock.h"
#include "metrics.h"
#include "metrics_event.h"
#include <ruby/io.h>
#include <string.h>
#include "thread_state.h"

// A connection handed over, by its file descriptor (a server hands over IO objects; the
// descriptor is what both sides can read without calling Ruby). A newer stamp of the same
// descriptor wins; a stamp whose slot another descriptor took is lost, counted (dropped).
#define HANDOFF_TABLE 4096
typedef struct { int fd; uint64_t arrival_ns, carried_wait_ns, handoff_ns; int exact; } stamp;
static stamp table[HANDOFF_TABLE];
static uint64_t stamps_taken, stamps_overwritten;

static gvls_thread *current_slot(void) {
    if (!gvls_on_main_ractor()) return NULL;  // other Ractors' servers: their GVL does not order us
    return gvls_thread_for(rb_thread_current());
}

// Where the thread's work arrived: when its longest block since its last mark ended (a server
// thread in IO.select; not the nonblocking accept or read after it, which also release the GVL).
// Then a new mark: the next connection's wait starts after this one's. 0: no block since counting began.
static uint64_t arrival_and_mark(gvls_thread *slot) {
    uint64_t arrival_ns = slot->metrics.mark_longest_idle_woke_ns;
    uint32_t seq = gvls_metrics_write_begin(slot);  // this thread's hook writes them too, never meanwhile
    slot->metrics.mark_longest_idle_ns = 0;
    slot->metrics.mark_longest_idle_woke_ns = 0;
    gvls_metrics_write_end(slot, seq);
    return arrival_ns;
}

// On the thread that readied the work: it arrived when this thread's wait for it ended, and the
// thread's GVL wait since then is the work's too.
static int stamp_now(int fd) {
    gvls_thread *slot = current_slot();
    if (!slot || fd < 0 || !atomic_load(&gvls_metrics.enabled)) return 0;
    uint64_t arrival_ns = arrival_and_mark(slot);
    if (!arrival_ns) return 0;
    uint64_t now_ns = gvls_now_ns(), wait_now;
    int exact;
    uint64_t since = gvls_metrics_wait_since(slot, arrival_ns, now_ns, &exact, &wait_now);
    stamp *s = &table[fd % HANDOFF_TABLE];
    if (s->handoff_ns && s->fd != fd) stamps_overwritten++;
    *s = (stamp){ .fd = fd, .arrival_ns = arrival_ns, .carried_wait_ns = since, .handoff_ns = now_ns, .exact = exact };
    return 1;
}

static uint64_t idle_now(const gvls_thread *slot, uint64_t now_ns) {
    uint64_t counters[GVLS_COUNTERS_NOW];
    gvls_metrics_counters_now(slot, now_ns, counters, NULL);
    return counters[2];
}

// On the thread that will serve the work: its own wait from the hand-off on counts too.
static void claim(int fd) {
    gvls_thread *slot = current_slot();
    if (!slot) return;
    slot->ticket.set = 0;  // an earlier connection's, never started (the reactor took it back)
    if (fd < 0) return;
    stamp *s = &table[fd % HANDOFF_TABLE];
    if (!s->handoff_ns || s->fd != fd) return;
    uint64_t now_ns = gvls_now_ns(), wait_now;
    int exact;
    uint64_t since = gvls_metrics_wait_since(slot, s->handoff_ns, now_ns, &exact, &wait_now);
    slot->ticket = (gvls_handoff){
        .set = 1, .exact = exact && s->exact, .arrival_ns = s->arrival_ns, .carried_wait_ns = s->carried_wait_ns,
        .wait_base_ns = wait_now > since ? wait_now - since : 0, .idle_base_ns = idle_now(slot, now_ns),
    };
    s->handoff_ns = 0;
    stamps_taken++;
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

static ID id_io;

static VALUE client_io(VALUE client) {
    VALUE io = rb_attr_get(client, id_io);  // Puma::Client's @io (Puma 6-8)
    return io;
}

// ---- Puma: prepended to Puma::Server (lib/gvlscope/integrations/handoffs.rb) -----------------

// new_client(io, listener): the server thread just accepted io.
static VALUE puma_new_client(int argc, VALUE *argv, VALUE self) {
    if (argc >= 1) stamp_now(fd_of(argv[0]));
    return rb_call_super(argc, argv);
}

// reactor_wakeup(client): the reactor thread found the client's request complete (a keep-alive
// connection's next request, or a slow client's).
static VALUE puma_reactor_wakeup(int argc, VALUE *argv, VALUE self) {
    if (argc >= 1) stamp_now(fd_of(client_io(argv[argc - 1])));
    return rb_call_super(argc, argv);
}

// process_client([processor,] client): a pool thread takes the connection.
static VALUE puma_process_client(int argc, VALUE *argv, VALUE self) {
    if (argc >= 1) claim(fd_of(client_io(argv[argc - 1])));
    return rb_call_super(argc, argv);
}

// ---- Sidekiq: prepended to Sidekiq::Processor --------------------------------------------------

// fetch: the processor blocks for a job (BRPOP) and returns it, or nil. The job arrived when the
// longest block in the fetch ended (the BRPOP read; a job that was waiting already: a short one),
// and the processor's wait from then on is the job's.
static VALUE sidekiq_fetch(int argc, VALUE *argv, VALUE self) {
    gvls_thread *slot = current_slot();
    if (slot) arrival_and_mark(slot);
    VALUE work = rb_call_super(argc, argv);
    slot = current_slot();
    if (slot) slot->ticket.set = 0;
    if (slot && RTEST(work) && atomic_load(&gvls_metrics.enabled)) {
        uint64_t arrival_ns = arrival_and_mark(slot);
        if (!arrival_ns) return work;  // nothing blocked in the fetch: no wake to start from
        uint64_t now_ns = gvls_now_ns(), wait_now;
        int exact;
        uint64_t since = gvls_metrics_wait_since(slot, arrival_ns, now_ns, &exact, &wait_now);
        slot->ticket = (gvls_handoff){
            .set = 1, .exact = exact, .arrival_ns = arrival_ns, .carried_wait_ns = 0,
            .wait_base_ns = wait_now > since ? wait_now - since : 0, .idle_base_ns = idle_now(slot, now_ns),
        };
    }
    return work;
}

// Native.handoff_stats -> [stamps taken by a request, stamps lost to another descriptor]
static VALUE handoff_stats(VALUE self) {
    return rb_ary_new_from_args(2, ULL2NUM(stamps_taken), ULL2NUM(stamps_overwritten));
}

// In a forked child (a Puma worker): the parent's connections are not the child's.
void gvls_handoff_after_fork(void) {
    memset(table, 0, sizeof(table));
}

void gvls_handoff_init(VALUE mNative) {
    id_io = rb_intern("@io");
    VALUE puma = rb_define_module_under(mNative, "PumaHandoff");
    rb_define_method(puma, "new_client", puma_new_client, -1);
    rb_define_method(puma, "reactor_wakeup", puma_reactor_wakeup, -1);
    rb_define_method(puma, "process_client", puma_process_client, -1);
    VALUE sidekiq = rb_define_module_under(mNative, "SidekiqHandoff");
    rb_define_private_method(sidekiq, "fetch", sidekiq_fetch, -1);
    rb_define_singleton_method(mNative, "handoff_stats", handoff_stats, 0);
}
