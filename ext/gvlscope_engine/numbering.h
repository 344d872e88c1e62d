// The engine's numbers: event kinds, states and reasons.
#ifndef GVLSCOPE_ENGINE_NUMBERING_H
#define GVLSCOPE_ENGINE_NUMBERING_H

// ---- vocabulary (lib/gvlscope/vocabulary.rb); Ruby maps the numbers back to symbols.
enum { EV_STARTED = 1, EV_READY, EV_RESUMED, EV_SUSPENDED, EV_EXITED, EV_GC_ENTER, EV_GC_EXIT, EV_ARG, EV_SAMPLE };
enum { ST_NONE = 0, ST_STARTED, ST_WAIT, ST_RUN, ST_GC, ST_IDLE, ST_EXITED, ST_GONE, ST_COUNT };
// Reasons: release causes and idle reasons in one numbering (Model::Scan::REASONS).
enum { R_NONE = 0, R_IO, R_SLEEP, R_LOCK, R_JOIN, R_PASS, R_BLOCKING, R_PREEMPTED, R_EXIT, R_IO_SLEEP, R_UNKNOWN,
       R_COUNT };

#endif
