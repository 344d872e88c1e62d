#ifndef GVLSCOPE_HOOK_H
#define GVLSCOPE_HOOK_H

void gvls_hook_init(void);
// Installs the GVL event hook and the GC tracepoint (idempotent).
void gvls_hook_install(void);
// Removes them (idempotent). On return no callback is running: removal waits for those in flight.
void gvls_hook_remove(void);
// Installs or removes the hook so it runs exactly while a consumer (trace or metrics) is on.
void gvls_hook_sync(void);

#endif
