#ifndef GVLSCOPE_HOOK_H
#define GVLSCOPE_HOOK_H

void gvls_hook_init(void);
// Installs the GVL event hook and the GC tracepoint (idempotent).
void gvls_hook_install(void);
// Removes them (idempotent). On return no callback is running: removal waits for those in flight.
void gvls_hook_remove(void);

#endif
