// The .gvl framing (format.h): the one place that writes a file header, an events chunk, the
// thread table and the end record. sink_file.c writes a trace with it, sink_ring.c its dumps.
// Every writer returns 0 or an errno and only calls write(2), so it may run without the GVL;
// except gvls_finish_file, which writes the thread table (calls Ruby: with the GVL).
#ifndef GVLSCOPE_TRACE_FRAMING_H
#define GVLSCOPE_TRACE_FRAMING_H

#include "gvlscope.h"
#include "format.h"
#include "thread_state.h"
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

uint64_t gvls_realtime_ns(void);

// A file gvlscope writes, as it was opened. The program may close the descriptor under us (a
// "close every inherited descriptor" loop, as daemonizers and test harnesses run) and get its
// number back for a file of its own: so the descriptor sits high, where the lowest-free rule
// rarely reaches, and every write first checks (fstat) that it still is this file.
typedef struct { int fd; dev_t dev; ino_t ino; } gvls_out;
#define GVLS_OUT_NONE ((gvls_out){ .fd = -1 })
// The error of a write refused because fd is no longer the file opened: not an errno.
#define GVLS_ERR_NOT_OURS 0x7fff0001
// strerror, knowing GVLS_ERR_NOT_OURS.
const char *gvls_write_strerror(int err);
// Creates the file at path for writing (never an existing one), or raises SystemCallError.
gvls_out gvls_open_trace_file(VALUE path);
// 0 while out.fd is still the file opened, else GVLS_ERR_NOT_OURS (closed, or another file now).
int gvls_out_check(const gvls_out *out);
// Closes out.fd if it is still ours (never the program's file that took its number); 0 or an errno.
int gvls_out_close(gvls_out *out);
int gvls_write_all(const gvls_out *out, const void *data, size_t bytes);
// flags: GVLS_FILE_* (format.h).
int gvls_write_file_header(const gvls_out *out, uint64_t start_monotonic_ns, uint64_t start_realtime_ns,
                           uint32_t timeslice_us, uint32_t flags);
// One events chunk: the header and its header->count records.
int gvls_write_events(const gvls_out *out, const gvls_events_header *header, const uint64_t *records);
// One events chunk holding only the records at or after cutoff_ns, rebased so the chunk starts at
// its first kept record. Times are absolute (base_abs_ns is the header's base_ns as an absolute
// time); the written base_ns is relative to cutoff_ns, the file's start. scratch holds up to
// header->count records. *kept: records written (0: nothing was, not even the drops before).
int gvls_write_events_since(const gvls_out *out, const gvls_events_header *header, const uint64_t *records, uint64_t base_abs_ns,
                            uint64_t cutoff_ns, uint64_t *scratch, uint32_t *kept);
// A whole THREADS chunk (its chunk header and one record per ref) as a Ruby String; names are
// read now (gvls_thread_label). named, if not NULL, gets 1 per ref whose thread has a non-empty
// name. With the GVL.
VALUE gvls_thread_records_chunk(const gvls_thread_ref *refs, size_t len, uint8_t *named);
// Ends a file: unless err already, the thread table, what write_more writes (if not NULL: the
// sinks pass gvls_write_stacks_chunk, as the framing is below the consumers whose chunks it
// frames) and the end record; then closes out (gvls_out_close).
// Returns the first error (err, a write's, close's) or 0. With the GVL.
int gvls_finish_file(gvls_out *out, int err, int (*write_more)(const gvls_out *out), const gvls_end_record *end);

#endif
