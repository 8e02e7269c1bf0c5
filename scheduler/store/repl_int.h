/*
 * repl_int.h — the replication log's internal split (see repl.h): repl.c
 * owns the role, the term, the LSN and the capture; repl_ring.c owns the
 * ring of recent frames, the standby's acknowledgements, the commit wait
 * and the events hook. repl.c calls into repl_ring.c, never the reverse,
 * so the ring is told everything it needs (term, mode) as arguments.
 */
#ifndef HF_REPL_INT_H
#define HF_REPL_INT_H

#include "scheduler/store/repl.h"

#include <sqlite3.h>

/* (Re)start the ring empty after LSN last, with cfg's mode, timeout and
 * size. RET 0. */
int  repl_ring_reset(int64_t last, const repl_config *cfg);
/* LSN last is a gap (repl.c, capture_gap): drop every frame and make last
 * the newest LSN, so a standby behind it is answered "gone". */
void repl_ring_skip(int64_t last);
/* Free the frames, wake every waiter and stream reader (they return). */
void repl_ring_stop(void);
/* Append the frame of the transaction that committed LSN lsn (the next
 * after the ring's last); takes cs (sqlite3_malloc'd) whatever it returns.
 * Caller holds the log's mutex (commit order). RET 0 or HF_ENOMEM (the
 * ring then restarts after lsn: a standby bootstraps again). */
int  repl_ring_append(int64_t lsn, int64_t term, void *cs, int n);
/* Emit an operator-visible event through the hook (and nothing else). */
void repl_ring_event(const char *type, const char *detail);
/* The ring's and the standby's part of st. */
void repl_ring_status(repl_status *st);
/* Run sql (a BEGIN that opens a read transaction) on db holding repl_mu,
 * so that the transaction sees exactly the commits whose LSN repl_lsn()
 * and the ring already hold: none committed but not yet appended (the
 * snapshot's LSN is never ahead of the stream). RET sqlite3_exec's code. */
int  repl_read_begin(sqlite3 *db, const char *sql);

#endif
