// The metrics' hot-path state (metrics_event.h). Defined apart from metrics.c, which reads it for
// snapshots: the hook's inline event code then uses nothing of the snapshot side.
#include "metrics_event.h"

gvls_metrics_global gvls_metrics = { .timeslice_ns = 100000000 };
