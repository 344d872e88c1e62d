// The engine's numbers: event kinds, states and reasons, each defined once.
// - Event kinds are the recorder's (ext/gvlscope/format.h, enum gvls_event_kind): the numbers a
//   .gvl trace carries. The engine takes them from there, under its short names.
// - States and reasons are the engine's own, listed here once: the enums and the words
//   Engine::STATES and Engine::REASONS give Ruby both come from these lists.
// test/engine/numbering_test.rb checks the rest against these: lib/gvlscope/support/vocabulary.rb's EVENT_KINDS,
// Model::Scan's STATES and REASONS, and the Vocabulary's words for them.
#ifndef GVLSCOPE_ENGINE_NUMBERING_H
#define GVLSCOPE_ENGINE_NUMBERING_H

#include "../gvlscope/format.h"

// X(engine name, format.h name, word): every kind of record, events first, then ARG, SAMPLE and
// the event loops' turn records (version 4).
#define ENG_EVENT_KINDS(X)                                                                         \
    X(EV_STARTED, GVLS_EV_STARTED, "started") X(EV_READY, GVLS_EV_READY, "ready")                  \
    X(EV_RESUMED, GVLS_EV_RESUMED, "resumed") X(EV_SUSPENDED, GVLS_EV_SUSPENDED, "suspended")      \
    X(EV_EXITED, GVLS_EV_EXITED, "exited") X(EV_GC_ENTER, GVLS_EV_GC_ENTER, "gc_enter")            \
    X(EV_GC_EXIT, GVLS_EV_GC_EXIT, "gc_exit") X(EV_ARG, GVLS_EV_ARG, "arg")                        \
    X(EV_SAMPLE, GVLS_EV_SAMPLE, "sample") X(EV_TURN_BEGIN, GVLS_EV_TURN_BEGIN, "turn_begin")      \
    X(EV_TURN_END, GVLS_EV_TURN_END, "turn_end") X(EV_TURN_SITE, GVLS_EV_TURN_SITE, "turn_site") \
    X(EV_TURN_READY, GVLS_EV_TURN_READY, "turn_ready")

// X(name, word), from 0: the state of a thread in the pass (ST_NONE: before its first event, no
// word in Ruby; ST_GONE: after it exited or the trace ended).
#define ENG_STATES(X)                                                                              \
    X(ST_NONE, NULL) X(ST_STARTED, "started") X(ST_WAIT, "wait") X(ST_RUN, "run") X(ST_GC, "gc")  \
    X(ST_IDLE, "idle") X(ST_EXITED, "exited") X(ST_GONE, "gone")

// X(name, word), from 0: release causes and idle reasons in one numbering (R_NONE: none yet).
#define ENG_REASONS(X)                                                                             \
    X(R_NONE, NULL) X(R_IO, "io") X(R_SLEEP, "sleep") X(R_LOCK, "lock") X(R_JOIN, "join")          \
    X(R_PASS, "pass") X(R_BLOCKING, "blocking") X(R_PREEMPTED, "preempted") X(R_EXIT, "exit")      \
    X(R_IO_SLEEP, "io_sleep") X(R_UNKNOWN, "unknown")

// X(state): the states an overview lane counts, in the order of each bin's values
// (Analysis::Overview::STATES; Engine::LANE_STATES gives Ruby their words).
#define ENG_LANE_STATES(X) X(ST_RUN) X(ST_WAIT) X(ST_IDLE) X(ST_GC)

#define ENG_KIND_ENUM(name, number, word) name = number,
#define ENG_NAME_ENUM(name, word) name,
enum { ENG_EVENT_KINDS(ENG_KIND_ENUM) };
enum { ENG_STATES(ENG_NAME_ENUM) ST_COUNT };
enum { ENG_REASONS(ENG_NAME_ENUM) R_COUNT };
#define ENG_LANE_ENUM(state) LANE_##state,
enum { ENG_LANE_STATES(ENG_LANE_ENUM) LANE_STATES }; // LANE_ST_RUN = 0, ...: a state's place in a bin

#endif
