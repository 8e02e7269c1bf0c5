/*
 * purge.h — removing a deleted experiment's rows in bounded transactions
 * (docs/scheduler.md "Deleting an experiment").
 *
 * DELETE /api/v1/experiments/{id} does not delete the experiment's rows:
 * in one small transaction the core forgets the experiment and queues it
 * in purge_queue (schema/0016_purge_queue.sql). purge_step then deletes
 * its rows one bounded batch at a time, children before parents so that
 * every commit keeps the foreign keys:
 *
 *   1. the webhook outbox rows of the experiment's webhooks, then the
 *      webhooks (webhooks.experiment_id)
 *   2. its trials' metrics, then their logs (the FTS index follows by
 *      trigger)
 *   3. the experiment's events
 *   4. trial by trial: its allocations, checkpoint rows (their objects'
 *      hashes are handed back), leftover events, and the trial row
 *   5. its code-context rows, the purge_queue row and the experiments row
 *
 * Workload: an experiment may hold millions of metric points and log
 * lines. A batch deletes at most lim->rows rows and about lim->bytes
 * bytes of row data (a replication changeset holds every deleted row's
 * old values, so this bounds the frame a batch's transaction makes: a
 * row is let in only while the total stays within lim->bytes, at least
 * one row per batch), and stops once lim->us have passed (checked before
 * every row), so whoever holds a lock around the transaction holds it
 * briefly. Deleting a metric row costs several microseconds (its table
 * row and two index entries, and the pages written to the WAL at the
 * commit), so the time bound is what ends most batches of metrics. The
 * COMMIT comes on top of lim->us: writing the pages the batch dirtied.
 *
 * Contract: purge_step runs inside a write transaction the caller opened
 * on db and commits or rolls back; it never begins or ends one. The
 * queued experiments' rows must no longer grow (the core forgot them when
 * it queued them; a checkpoint row that an upload already under way still
 * records goes with its trial in step 4, or is refused by the foreign key
 * once the trial is gone). Queued experiments are purged one at a time,
 * lowest id first.
 */
#ifndef HF_PURGE_H
#define HF_PURGE_H

#include "scheduler/store/ckstore.h"

#include <sqlite3.h>
#include <stddef.h>
#include <stdint.h>

typedef struct purge_limits {
    int64_t rows;    /* rows per batch */
    int64_t bytes;   /* bytes of row data per batch (an estimate: the columns' lengths plus a fixed
                        overhead per row; a log line counts twice, for its FTS index entries) */
    int64_t us;      /* microseconds per batch */
} purge_limits;

/* Where the purge of the queue's first experiment stands, kept by the
 * caller from one batch to the next (all zero to start, and after a batch
 * whose transaction was rolled back: the rows it passed came back).
 * Starting over is always correct; it costs a few index lookups per
 * trial. purge_step resets it when the queue's head changes. */
typedef struct purge_cursor {
    int64_t experiment_id;
    int     phase;         /* the step of the list above */
    int     ranged;        /* metrics, logs: from and to are set */
    int64_t from, to;      /* metrics, logs: the experiment's rows left have seq in (from, to] */
    int64_t scan;          /* metrics, logs: the window is found up to this trial */
} purge_cursor;

/* What one batch did. */
typedef struct purge_batch {
    int64_t experiment_id;   /* the experiment it worked on; 0: the queue was empty */
    int64_t rows, bytes;     /* rows deleted, and their bytes as counted against lim->bytes */
    int     done;            /* its last rows went (the queue row, the experiments row) */
    /* The objects the deleted checkpoint rows named (malloc'ed, nhashes
     * of them): release them (ckretain_release) once the transaction is
     * committed and durable; an object another row names stays. */
    char  (*hashes)[CKSTORE_HASH_LEN + 1];
    size_t  nhashes;
} purge_batch;

/* Delete one batch of the first queued experiment's rows in db's open
 * transaction, within lim; *out says what went (purge_batch_free it
 * whatever the result). RET 0, or HF_E* (store_rc of SQLite's error;
 * HF_ENOMEM) with the error logged: the caller rolls the transaction back
 * and zeroes *cur. */
int  purge_step(sqlite3 *db, const purge_limits *lim, purge_cursor *cur, purge_batch *out);
void purge_batch_free(purge_batch *b);

/* How many experiments wait in purge_queue. RET 0 or HF_EDB. */
int  purge_queued(sqlite3 *db, int64_t *n);

#endif
