// The report engine: one pass over a .gvl trace (or imported events) that replays the timeline's
// state machine (test/support/reference_timeline.rb, rule for rule) and feeds every consumer as
// intervals close, so no interval is kept: per-thread rows, histograms, blame, code locations,
// the HTML overview, detail windows and the exports' interval spill. docs/architecture.md has the
// whole design; the recorder (ext/gvlscope) is a separate extension and shares nothing with this
// but the trace format's numbers (ext/gvlscope/format.h, through numbering.h).
#ifndef GVLSCOPE_ENGINE_H
#define GVLSCOPE_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "util.h"
#include "numbering.h"
#include "median.h"
#include "index.h"

// ---- one interval, as Model::Interval.
typedef struct {
    int64_t start;
    int64_t end;
    uint32_t thread;   // dense thread index
    uint32_t native;   // native serial when has_native
    uint32_t site;     // release site stack id (0: none)
    uint8_t state;
    uint8_t reason;
    uint8_t has_native;
    uint8_t listed;    // false for the zero-length intervals the timeline does not keep
} eng_interval;

typedef struct eng_engine eng_engine;

#endif
