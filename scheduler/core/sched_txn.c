/*
 * sched_txn.c — transactions of the scheduler core (sched_int.h): every
 * public call that changes the model runs one store transaction under the
 * core lock; SSE events and agent doorbells queued during it are published
 * only after its COMMIT ("only reply after commit", sched.h). A failed
 * transaction is rolled back and the model is rebuilt from the store, so
 * memory never holds what is not durable.
 *
 * Group commit (docs/scheduler.md, "Concurrency and durability"): a
 * heartbeat that finds others queued for the core lock leaves its
 * transaction open for them and waits for the COMMIT that ends its
 * generation; s->gen counts ended transactions. The outcomes of the last
 * GRP_RING are kept, and, failures being rare, the last GRP_FAILS failed
 * ones (number and error): a waiter that slept through any number of
 * commits still learns its own outcome, unless more than GRP_FAILS
 * transactions failed meanwhile (then HF_EDB, and the agent re-sends the
 * batch, which is acknowledged once).
 *
 * Self-checks: every function here runs under s->lock (HF_ASSERT); in
 * abort mode (hf_assert.h) each ended transaction checks the model's
 * invariants (sched_check.c), so a change that breaks one fails the test
 * that made it, at the transaction that made it.
 */
#include "scheduler/core/sched_int.h"

#include "hf_assert.h"
#include "hf_err.h"
#include "hf_log.h"
#include "hf_time.h"
#include "scheduler/notify/events.h"
#include "scheduler/api/metrics.h"

#include <errno.h>
#include <stdatomic.h>

void txn_emit(sched *s, const char *type, json_t *data /* stolen */)
{
    HF_ASSERT(sched_lock_held(s));
    if (!data) return;
    if (!s->ev || events_subscribers(s->ev) == 0) { json_decref(data); return; }
    json_array_append_new(s->pending, json_pack("[so]", type, data));
}

int txn_watched(const sched *s)
{
    return s->ev && events_subscribers(s->ev) > 0;
}

void txn_ring_note(sched *s, int64_t agent_id)
{
    HF_ASSERT(sched_lock_held(s));
    if (!s->bell) return;
    for (size_t i = 0; i < s->nrings; i++)
        if (s->rings[i] == agent_id) return;
    if (sched_grow((void **)&s->rings, &s->crings, s->nrings + 1, sizeof *s->rings)) return;   /* heartbeat delivers it */
    s->rings[s->nrings++] = agent_id;
}

void txn_ring_forget(sched *s, int64_t agent_id)
{
    for (size_t i = 0; i < s->nrings; i++)
        if (s->rings[i] == agent_id) {
            s->rings[i] = s->rings[--s->nrings];
            return;
        }
}

void txn_begin(sched *s)
{
    HF_ASSERT(sched_lock_held(s));
    /* Deferred heartbeats wait for their COMMIT: give it to them before
     * work that may roll back its own transaction. */
    if (s->grp_open) txn_end(s);
    json_array_clear(s->pending);
    s->nrings = 0;
    for (size_t i = 0; i < s->ndirty; i++) s->dirty[i]->dirty_metrics = 0;
    s->ndirty = 0;
    s->txn_rc = store_begin(s->st);
}

void txn_join(sched *s)
{
    HF_ASSERT(sched_lock_held(s));
    if (!s->grp_open) txn_begin(s);
}

void txn_abort(sched *s)
{
    HF_ASSERT(sched_lock_held(s));
    store_rollback(s->st);
    json_array_clear(s->pending);
}

/* Transaction number s->gen ended with rc: wake the heartbeats of its group. */
static void txn_ended(sched *s, int rc)
{
    s->gen_rc[s->gen % GRP_RING] = rc;
    if (rc) {
        s->fail_gen[s->nfails % GRP_FAILS] = s->gen;
        s->fail_rc[s->nfails % GRP_FAILS] = rc;
        s->nfails++;
    }
    s->gen++;
    s->grp_open = 0;
    s->grp_n = 0;
    pthread_cond_broadcast(&s->grp_cv);
}

int txn_end(sched *s)
{
    HF_ASSERT(sched_lock_held(s));
    int rc = s->txn_rc;
    if (rc == 0) rc = store_commit(s->st);
    if (rc) {
        char err[256];
        atomic_fetch_add(&metrics.store_errors, 1);
        /* The statement that failed ran in this thread: whoever sets
         * txn_rc ends the transaction before releasing the lock (a
         * heartbeat defers only a clean one), so this is its message. */
        hf_error("store transaction failed (%s): %s; rolling back and reloading", hf_strerror(rc),
                 store_last_error());
        store_rollback(s->st);
        json_array_clear(s->pending);
        s->nrings = 0;
        s->ndirty = 0;
        sched_unload(s);
        if (sched_load(s, err, sizeof err)) hf_error("reload after failed transaction: %s", err);
        else sched_check_invariants(s);
        s->txn_rc = 0;
        txn_ended(s, rc);
        return rc;
    }
    size_t i;
    json_t *p;
    json_array_foreach(s->pending, i, p)
        events_publish(s->ev, json_string_value(json_array_get(p, 0)), json_array_get(p, 1));
    json_array_clear(s->pending);
    for (size_t k = 0; k < s->nrings && s->bell; k++) s->bell(s->bell_ctx, s->rings[k]);
    s->nrings = 0;
    if (s->dispatch_more && s->kick) s->kick(s->kick_ctx);
    txn_ended(s, 0);
    sched_check_invariants(s);
    return 0;
}

int txn_end_rows(sched *s)
{
    HF_ASSERT(sched_lock_held(s));
    HF_ASSERT(!s->grp_open);   /* txn_begin ended any group: no heartbeat's work is in here */
    int rc = s->txn_rc;   /* a failed statement was logged where it ran */
    if (rc == 0 && (rc = store_commit(s->st)))
        hf_error("store commit failed (%s): %s; rolled back", hf_strerror(rc), store_last_error());
    if (rc) {
        atomic_fetch_add(&metrics.store_errors, 1);
        store_rollback(s->st);
        s->txn_rc = 0;
    }
    json_array_clear(s->pending);
    s->nrings = 0;
    txn_ended(s, rc);
    return rc;
}

/* How transaction number g (ended) went: 0, its error, or HF_EDB when it is
 * older than every remembered failure and failures were forgotten since. */
static int txn_outcome(const sched *s, uint64_t g)
{
    if (s->gen - g <= GRP_RING) return s->gen_rc[g % GRP_RING];
    uint64_t kept = s->nfails < GRP_FAILS ? s->nfails : GRP_FAILS;
    for (uint64_t k = 1; k <= kept; k++) {
        size_t i = (size_t)((s->nfails - k) % GRP_FAILS);
        if (s->fail_gen[i] == g) return s->fail_rc[i];
        if (s->fail_gen[i] < g) return 0;     /* failures are in order: g is older than none kept */
    }
    return s->nfails > GRP_FAILS ? HF_EDB : 0;
}

/* Group commit: when other heartbeats are queued for the core lock, this
 * one leaves the transaction open, releases the lock and waits for the
 * COMMIT that includes its work (the next heartbeat finds nobody behind
 * it, or the group is full or old, or GRP_WAIT_MS pass); only then is its
 * reply sent, so nothing is acknowledged before it is durable. One COMMIT
 * (WAL frame writes of the pages all of them touched) then serves up to
 * GRP_MAX heartbeats. On a failed COMMIT every heartbeat of the group gets
 * the error and memory is reloaded from the store (txn_end). */
int txn_end_grouped(sched *s)
{
    HF_ASSERT(sched_lock_held(s));
    int64_t mono = hf_mono_ms();
    if (s->txn_rc || atomic_load(&s->hb_queue) == 0 || s->grp_n >= GRP_MAX ||
        (s->grp_n > 0 && mono - s->grp_t0 >= GRP_MS))
        return txn_end(s);
    if (s->grp_n++ == 0) s->grp_t0 = mono;
    s->grp_open = 1;
    uint64_t mine = s->gen;
    atomic_fetch_add(&metrics.heartbeats_grouped, 1);
    while (s->gen <= mine) {
        struct timespec ts = hf_deadline(CLOCK_REALTIME, GRP_WAIT_MS);
        int w = sched_lock_wait(s, &s->grp_cv, &ts);
        if (w == ETIMEDOUT && s->gen <= mine && s->grp_open) txn_end(s);
    }
    return txn_outcome(s, mine);
}
