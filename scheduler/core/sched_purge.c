/*
 * sched_purge.c — the purge of deleted experiments' rows (sched_int.h;
 * docs/scheduler.md "Deleting an experiment").
 *
 * sched_experiment_delete only queues the experiment (purge_queue) and
 * forgets it. Every tick then runs one batch of store/purge.h in its own
 * transaction on the writer, under the core lock: at most SCHED_PURGE_ROWS
 * rows, SCHED_PURGE_BYTES bytes of row data (the bound of the replication
 * frame the transaction makes) and SCHED_PURGE_US of work, plus its COMMIT
 * (sched.h). So the lock is held about 10 ms per tick whatever the size
 * of the experiment — every heartbeat and request waits at most that long
 * behind it — and the WAL grows by one batch at a time, which the
 * checkpointer folds in between ticks.
 *
 * The batch touches no record of the model (the experiment left it when
 * it was queued), so a failed one is rolled back without a reload
 * (txn_end_rows), the cursor is zeroed (the rows it passed came back) and
 * the purge waits PURGE_RETRY_MS before trying again, as a full disk
 * would fail every tick. After a commit, the checkpoint objects of the
 * deleted rows are handed to the release hook once the commit is durable
 * (an object must never go before the rows that name it are surely gone).
 */
#include "scheduler/core/sched_int.h"
#include "scheduler/store/repl.h"

#include "hf_err.h"
#include "hf_log.h"
#include "hf_time.h"
#include "scheduler/api/metrics.h"

#include <stdatomic.h>

#define PURGE_RETRY_MS 10000

_Static_assert(SCHED_HASH_LEN == CKSTORE_HASH_LEN, "the release hook passes purge.h's hashes as they are");

void sched_set_release(sched *s, void (*release)(void *ctx, const char (*hashes)[SCHED_HASH_LEN + 1], size_t n),
                       void *ctx)
{
    sched_lock(s);
    s->release = release;
    s->release_ctx = ctx;
    sched_unlock(s);
}

/* Batch b committed (was: the experiment the purge stood at before it):
 * count it, and say so when its experiment is gone. */
static void purge_note(sched *s, const purge_batch *b, int64_t was, int64_t mono)
{
    if (b->experiment_id == 0) {   /* the count was stale: nothing is queued */
        s->npurge = 0;
        return;
    }
    if (b->experiment_id != was) {   /* its first batch in this process, or since a failed one */
        s->purge_t0_mono = mono;
        s->purge_rows = 0;
    }
    s->purge_rows += b->rows;
    if (!b->done) return;
    if (s->npurge > 0) s->npurge--;
    hf_info("experiment %lld purged: %lld rows in %.1f s", (long long)b->experiment_id, (long long)s->purge_rows,
            (double)(hf_mono_ms() - s->purge_t0_mono) / 1000.0);
}

void exp_purge_step(sched *s)
{
    static const purge_limits lim = {.rows = SCHED_PURGE_ROWS, .bytes = SCHED_PURGE_BYTES, .us = SCHED_PURGE_US};
    purge_batch b = {0};
    sched_lock(s);
    int64_t mono = hf_mono_ms();
    if (s->npurge == 0 || mono < s->purge_retry_mono) {
        sched_unlock(s);
        return;
    }
    int64_t was = s->purge_cur.experiment_id;
    txn_begin(s);
    /* its DELETEs from metrics go through the session (a fresh transaction never logs metrics) */
    if (s->txn_rc == 0) s->txn_rc = repl_conn_metric_session(store_repl(s->st));
    if (s->txn_rc == 0) s->txn_rc = purge_step(store_db(s->st), &lim, &s->purge_cur, &b);
    int rc = txn_end_rows(s);
    if (rc == 0) {
        purge_note(s, &b, was, mono);
    } else {
        s->purge_cur = (purge_cursor){0};
        s->purge_retry_mono = mono + PURGE_RETRY_MS;
        hf_warn("purge of deleted experiments: the batch failed (%s); next try in %d s", hf_strerror(rc),
                PURGE_RETRY_MS / 1000);
    }
    void (*release)(void *, const char (*)[SCHED_HASH_LEN + 1], size_t) = s->release;
    void *ctx = s->release_ctx;
    sched_unlock(s);
    if (rc == 0) atomic_fetch_add(&metrics.purged_rows, (uint64_t)b.rows);
    /* Only once the deletion is on disk: a power cut before could bring
     * back rows naming a removed object. When the flush failed, the
     * objects stay until the start-up collection finds them unnamed. */
    if (rc == 0 && b.nhashes && release && store_wait_durable(s->st) == 0) release(ctx, b.hashes, b.nhashes);
    purge_batch_free(&b);
}
