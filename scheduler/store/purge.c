/*
 * purge.c — the bounded batches that remove a deleted experiment's rows
 * (purge.h; docs/scheduler.md "Deleting an experiment").
 *
 * Each step of the list in purge.h but the trials is one "pick" query
 * giving (key, mine, bytes) of up to PICK rows and one DELETE by key, run
 * row by row so that the limits are checked before every row: a pick, its
 * rows deleted, the next pick, until the pick comes back empty (the step
 * is done) or the batch is full. The metrics and logs picks walk a window
 * of their table in seq order (see rows_steps), from cur->from, so what
 * an earlier batch passed is not looked at again. A trial row goes with
 * its remaining children in one go: its allocations, checkpoint rows and
 * events are few.
 *
 * The statements are prepared on each call: a batch runs for
 * milliseconds, a prepare takes microseconds, and no statement outlives
 * the caller's transaction.
 */
#include "scheduler/store/purge.h"
#include "scheduler/store/store.h"

#include "hf_err.h"
#include "hf_log.h"
#include "hf_time.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define PICK 256   /* rows per pick */

enum { PH_OUTBOX, PH_HOOKS, PH_METRICS, PH_LOGS, PH_EVENTS, PH_TRIALS, PH_LAST };

/* A step deleted row by row. pick: ?1 the experiment, ?2 how many;
 * columns: the key, whether the row is the experiment's, its bytes. del:
 * ?1 the key. A windowed step (metrics, logs: range is set) walks its
 * table in key (= insertion) order through the window (?3, ?4] of keys
 * that holds the experiment's rows, which range gives: rows of other
 * experiments inside it are passed over, not deleted. In that order each
 * table page is emptied in one go, where trial by trial order came back
 * to a page once for every trial that reported at the same time (and so
 * wrote it to the WAL as many times): 1.3-1.6x the rows per batch with
 * 8-16 trials reporting at once (bench/purge_delete.c). Whether a row is
 * the experiment's is a lookup of its trial by key; the window itself
 * costs two index lookups per trial of the experiment, once per step,
 * RANGE_TRIALS trials at a time (window_of). */
#define MINE(row) "((SELECT t.experiment_id FROM trials t WHERE t.id=" row ".trial_id)=?1)"   /* a lookup by key */
/* The smallest and largest key of table's rows of up to ?3 trials of
 * experiment ?1 after trial ?2, the last of those trials, how many. */
#define RANGE(table)                                                                                        \
    "SELECT min(lo), max(hi), max(id), count(*) FROM (SELECT t.id, (SELECT min(seq) FROM " table          \
    " WHERE trial_id=t.id) AS lo, (SELECT max(seq) FROM " table " WHERE trial_id=t.id) AS hi FROM trials t " \
    "WHERE t.experiment_id=?1 AND t.id>?2 ORDER BY t.id LIMIT ?3)"
#define RANGE_TRIALS 256
static const struct rows_step {
    const char *name, *pick, *del, *range;
    const char *also;   /* run before del with the same key (its rows counted), or NULL; the pick's
                         * 4th column is then the rows both delete */
} rows_steps[] = {
    [PH_OUTBOX] = {"webhook_outbox",
                   "SELECT o.id, 1, 64 + IFNULL(length(o.last_error),0) FROM webhooks h "
                   "JOIN webhook_outbox o ON o.hook_id=h.id WHERE h.experiment_id=?1 LIMIT ?2",
                   "DELETE FROM webhook_outbox WHERE id=?1", NULL},
    [PH_HOOKS] = {"webhooks",
                  "SELECT id, 1, 64 + length(url) + length(secret) + length(events) + IFNULL(length(created_by),0) "
                  "FROM webhooks WHERE experiment_id=?1 LIMIT ?2",
                  "DELETE FROM webhooks WHERE id=?1", NULL},
    [PH_METRICS] = {"metrics",
                    "SELECT m.seq, " MINE("m") ", 64 + length(m.name) "
                    "FROM metrics m WHERE m.seq>?3 AND m.seq<=?4 ORDER BY m.seq LIMIT ?2",
                    "DELETE FROM metrics WHERE seq=?1",
                    RANGE("metrics")},
    [PH_LOGS] = {"logs",
                 /* a line of another experiment is never read: its length only when the row is ours */
                 "SELECT l.seq, " MINE("l") ", CASE WHEN " MINE("l") " "
                 "THEN 64 + length(l.stream) + 2 * length(CAST(l.line AS BLOB)) ELSE 0 END "
                 "FROM logs l WHERE l.seq>?3 AND l.seq<=?4 ORDER BY l.seq LIMIT ?2",
                 "DELETE FROM logs WHERE seq=?1",
                 RANGE("logs")},
    /* An event goes with its outbox rows for every hook, global hooks'
     * included (those are not the experiment's and PH_OUTBOX leaves them):
     * an outbox row whose event is gone is never delivered and was counted
     * as pending forever (schema/0017_outbox_event.sql). */
    [PH_EVENTS] = {"events",
                   "SELECT id, 1, 64 + length(type) + IFNULL(length(detail),0) + IFNULL(length(user_name),0) + 64 * n, "
                   "1 + n FROM (SELECT id, type, detail, user_name, (SELECT count(*) FROM webhook_outbox o "
                   "WHERE o.event_id=e.id) AS n FROM events e WHERE e.experiment_id=?1 LIMIT ?2)",
                   "DELETE FROM events WHERE id=?1", NULL, "DELETE FROM webhook_outbox WHERE event_id=?1"},
};

/* A trial's children, deleted with it (?1 the trial). Metrics and logs
 * are empty by then (steps 2); they are here so that the trial's DELETE
 * can never fail on its foreign keys. */
static const char *const trial_children[] = {
    "DELETE FROM metrics WHERE trial_id=?1",
    "DELETE FROM logs WHERE trial_id=?1",
    "DELETE FROM allocations WHERE trial_id=?1",
    "DELETE FROM events WHERE trial_id=?1",
    "DELETE FROM checkpoints WHERE trial_id=?1",
    "DELETE FROM trials WHERE id=?1",
};
#define TRIAL_CHILD_BYTES 128   /* counted per child row (they are small and not picked) */

typedef struct batch_run {
    sqlite3            *db;
    const purge_limits *lim;
    int64_t             t0_us;
    purge_batch        *out;
    int64_t             passed;   /* rows of a window passed over (others' rows) */
    const char         *what;     /* the step, for the error message */
} batch_run;

/* Is the batch full for n rows of b bytes (b 0: a row passed over)? Never
 * before it made progress (a row deleted, or passed over). */
static int batch_full_n(const batch_run *r, int64_t b, int64_t n)
{
    const purge_batch *o = r->out;
    if (o->rows == 0 && r->passed == 0) return 0;
    if (hf_mono_us() - r->t0_us >= r->lim->us) return 1;
    return b > 0 && o->rows > 0 && (o->rows + n > r->lim->rows || o->bytes + b > r->lim->bytes);
}

static int batch_full(const batch_run *r, int64_t b)
{
    return batch_full_n(r, b, 1);
}

static int sql_fail(const batch_run *r, int src)
{
    hf_error("purge of experiment %lld (%s): %s", (long long)r->out->experiment_id, r->what, sqlite3_errmsg(r->db));
    return store_rc(src) ? store_rc(src) : HF_EDB;
}

static int prepare(const batch_run *r, const char *sql, sqlite3_stmt **st)
{
    int src = sqlite3_prepare_v2(r->db, sql, -1, st, NULL);
    return src == SQLITE_OK ? 0 : sql_fail(r, src);
}

/* Step a statement that returns no rows. RET 0 or HF_E*. */
static int exec_reset(const batch_run *r, sqlite3_stmt *st)
{
    int src = sqlite3_step(st);
    int rc = src == SQLITE_DONE ? 0 : sql_fail(r, src);   /* the message before the reset */
    sqlite3_reset(st);
    return rc;
}

/* The window of a windowed step: the keys of the experiment's rows lie
 * in (cur->from, cur->to]. Found RANGE_TRIALS trials at a time (each
 * costs two index lookups, a few microseconds), from cur->scan on, within
 * the batch's bounds: min in cur->from, max in cur->to meanwhile. RET 0
 * (cur->ranged set; an empty window when the experiment has no row), 1
 * (the batch is full: go on in the next), or HF_E*. */
static int window_of(batch_run *r, const struct rows_step *p, purge_cursor *cur)
{
    sqlite3_stmt *st = NULL;
    int rc = prepare(r, p->range, &st);
    if (rc) return rc;
    if (cur->scan == 0) {   /* a new window */
        cur->from = INT64_MAX;
        cur->to = 0;
    }
    for (;;) {
        if (batch_full(r, 0)) { rc = 1; break; }
        sqlite3_bind_int64(st, 1, r->out->experiment_id);
        sqlite3_bind_int64(st, 2, cur->scan);
        sqlite3_bind_int(st, 3, RANGE_TRIALS);
        int src = sqlite3_step(st);
        if (src != SQLITE_ROW) { rc = sql_fail(r, src); break; }
        int64_t n = sqlite3_column_int64(st, 3);
        if (sqlite3_column_type(st, 0) != SQLITE_NULL && sqlite3_column_int64(st, 0) < cur->from)
            cur->from = sqlite3_column_int64(st, 0);
        if (sqlite3_column_int64(st, 1) > cur->to) cur->to = sqlite3_column_int64(st, 1);
        if (n > 0) cur->scan = sqlite3_column_int64(st, 2);
        sqlite3_reset(st);
        r->passed += n;
        if (n < RANGE_TRIALS) {
            cur->from = cur->from == INT64_MAX ? 0 : cur->from - 1;
            cur->ranged = 1;
            break;
        }
    }
    sqlite3_finalize(st);
    return rc;
}

/* One rows_step. RET 0 the step is done, 1 the batch is full, or HF_E*. */
static int run_rows_step(batch_run *r, const struct rows_step *p, purge_cursor *cur)
{
    sqlite3_stmt *pick = NULL, *del = NULL, *also = NULL;
    int64_t key[PICK], bytes[PICK], nrows[PICK];
    int mine[PICK];
    int rc;
    r->what = p->name;
    if (p->range && !cur->ranged && (rc = window_of(r, p, cur))) return rc == 1 ? 1 : rc;
    if ((rc = prepare(r, p->pick, &pick)) || (rc = prepare(r, p->del, &del)) ||
        (p->also && (rc = prepare(r, p->also, &also))))
        goto end;
    for (;;) {
        int n = 0, src;
        sqlite3_bind_int64(pick, 1, r->out->experiment_id);
        sqlite3_bind_int(pick, 2, PICK);
        if (p->range) {
            sqlite3_bind_int64(pick, 3, cur->from);
            sqlite3_bind_int64(pick, 4, cur->to);
        }
        while (n < PICK && (src = sqlite3_step(pick)) == SQLITE_ROW) {
            key[n] = sqlite3_column_int64(pick, 0);
            mine[n] = sqlite3_column_int(pick, 1);
            bytes[n] = sqlite3_column_int64(pick, 2);
            nrows[n] = p->also ? sqlite3_column_int64(pick, 3) : 1;
            n++;
        }
        if (n < PICK && src != SQLITE_DONE) { rc = sql_fail(r, src); goto end; }
        sqlite3_reset(pick);
        if (n == 0) { rc = 0; goto end; }
        for (int i = 0; i < n; i++) {
            if (batch_full_n(r, mine[i] ? bytes[i] : 0, nrows[i])) { rc = 1; goto end; }
            if (mine[i]) {
                if (also) {
                    sqlite3_bind_int64(also, 1, key[i]);
                    if ((rc = exec_reset(r, also))) goto end;
                    r->out->rows += sqlite3_changes(r->db);
                }
                sqlite3_bind_int64(del, 1, key[i]);
                if ((rc = exec_reset(r, del))) goto end;
                r->out->rows += sqlite3_changes(r->db) > 0;
                r->out->bytes += bytes[i];
            } else {
                r->passed++;
            }
            if (p->range) cur->from = key[i];
        }
    }
end:
    sqlite3_finalize(pick);
    sqlite3_finalize(del);
    sqlite3_finalize(also);
    return rc;
}

/* Add the valid hashes of trial tid's checkpoint rows to out (duplicates
 * are harmless: releasing an object twice finds it gone or still named). */
static int trial_hashes(batch_run *r, sqlite3_stmt *q, int64_t tid)
{
    int src, rc = 0;
    sqlite3_bind_int64(q, 1, tid);
    while ((src = sqlite3_step(q)) == SQLITE_ROW) {
        const char *sha = (const char *)sqlite3_column_text(q, 0);
        if (!ckstore_hash_valid(sha)) continue;
        char(*nh)[CKSTORE_HASH_LEN + 1] = realloc(r->out->hashes, (r->out->nhashes + 1) * sizeof *nh);
        if (!nh) { rc = HF_ENOMEM; break; }
        r->out->hashes = nh;
        memcpy(nh[r->out->nhashes++], sha, CKSTORE_HASH_LEN + 1);
    }
    if (rc == 0 && src != SQLITE_DONE) rc = sql_fail(r, src);
    sqlite3_reset(q);
    return rc;
}

/* Step 4: trial by trial with its children. RET 0 done, 1 full, HF_E*. */
static int run_trials_step(batch_run *r)
{
    enum { NCHILD = sizeof trial_children / sizeof trial_children[0] };
    sqlite3_stmt *pick = NULL, *hashes = NULL, *del[NCHILD] = {0};
    int rc;
    r->what = "trials";
    if ((rc = prepare(r, "SELECT id, 192 + length(hparams) + IFNULL(length(latest),0) + IFNULL(length(best),0) + "
                         "IFNULL(length(notes),0) FROM trials WHERE experiment_id=?1 ORDER BY id LIMIT 1", &pick)) ||
        (rc = prepare(r, "SELECT DISTINCT sha256 FROM checkpoints WHERE trial_id=?1 AND sha256 IS NOT NULL", &hashes)))
        goto end;
    for (int k = 0; k < NCHILD; k++)
        if ((rc = prepare(r, trial_children[k], &del[k]))) goto end;
    for (;;) {
        sqlite3_bind_int64(pick, 1, r->out->experiment_id);
        int src = sqlite3_step(pick);
        if (src != SQLITE_ROW && src != SQLITE_DONE) { rc = sql_fail(r, src); goto end; }
        int64_t tid = sqlite3_column_int64(pick, 0), bytes = sqlite3_column_int64(pick, 1);
        sqlite3_reset(pick);
        if (src == SQLITE_DONE) { rc = 0; goto end; }
        if (batch_full(r, bytes)) { rc = 1; goto end; }
        if ((rc = trial_hashes(r, hashes, tid))) goto end;
        int64_t children = 0;
        for (int k = 0; k < NCHILD; k++) {
            sqlite3_bind_int64(del[k], 1, tid);
            if ((rc = exec_reset(r, del[k]))) goto end;
            children += sqlite3_changes(r->db);
        }
        r->out->rows += children;
        r->out->bytes += bytes + (children - 1) * TRIAL_CHILD_BYTES;
    }
end:
    sqlite3_finalize(pick);
    sqlite3_finalize(hashes);
    for (int k = 0; k < NCHILD; k++) sqlite3_finalize(del[k]);
    return rc;
}

/* Step 5: the code-context rows, the queue row and the experiments row.
 * RET 0 done, 1 full (left for the next batch), HF_E*. */
static int run_last_step(batch_run *r)
{
    static const char *const sql[] = {
        "DELETE FROM contexts WHERE experiment_id=?1",
        "DELETE FROM purge_queue WHERE experiment_id=?1",
        "DELETE FROM experiments WHERE id=?1",
    };
    sqlite3_stmt *st = NULL;
    int rc;
    r->what = "experiment";
    if ((rc = prepare(r, "SELECT 256 + length(config) + IFNULL(length(description),0) + IFNULL(length(tags),0) + "
                         "IFNULL(length(warm_history),0) FROM experiments WHERE id=?1", &st)))
        return rc;
    sqlite3_bind_int64(st, 1, r->out->experiment_id);
    int64_t bytes = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 256;
    sqlite3_finalize(st);
    if (batch_full(r, bytes)) return 1;
    for (size_t i = 0; i < sizeof sql / sizeof sql[0]; i++) {
        st = NULL;
        if ((rc = prepare(r, sql[i], &st))) return rc;
        sqlite3_bind_int64(st, 1, r->out->experiment_id);
        rc = exec_reset(r, st);
        r->out->rows += sqlite3_changes(r->db);
        sqlite3_finalize(st);
        if (rc) return rc;
    }
    r->out->bytes += bytes;
    return 0;
}

/* The queue's first experiment, 0 when it is empty. RET 0 or HF_E*. */
static int queue_head(sqlite3 *db, int64_t *xid)
{
    sqlite3_stmt *st = NULL;
    int src = sqlite3_prepare_v2(db, "SELECT experiment_id FROM purge_queue ORDER BY experiment_id LIMIT 1", -1, &st,
                                 NULL);
    *xid = 0;
    if (src == SQLITE_OK && (src = sqlite3_step(st)) == SQLITE_ROW) *xid = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    if (src == SQLITE_ROW || src == SQLITE_DONE) return 0;
    hf_error("purge: reading the queue: %s", sqlite3_errmsg(db));
    return store_rc(src) ? store_rc(src) : HF_EDB;
}

int purge_step(sqlite3 *db, const purge_limits *lim, purge_cursor *cur, purge_batch *out)
{
    memset(out, 0, sizeof *out);
    int rc = queue_head(db, &out->experiment_id);
    if (rc || out->experiment_id == 0) return rc;
    if (cur->experiment_id != out->experiment_id) *cur = (purge_cursor){.experiment_id = out->experiment_id};
    batch_run r = {.db = db, .lim = lim, .t0_us = hf_mono_us(), .out = out};
    while (cur->phase < PH_LAST) {
        rc = cur->phase == PH_TRIALS ? run_trials_step(&r) : run_rows_step(&r, &rows_steps[cur->phase], cur);
        if (rc) return rc == 1 ? 0 : rc;
        cur->phase++;
        cur->ranged = 0;
        cur->scan = 0;
    }
    rc = run_last_step(&r);
    if (rc) return rc == 1 ? 0 : rc;
    out->done = 1;
    *cur = (purge_cursor){0};
    return 0;
}

void purge_batch_free(purge_batch *b)
{
    if (!b) return;
    free(b->hashes);
    b->hashes = NULL;
    b->nhashes = 0;
}

int purge_queued(sqlite3 *db, int64_t *n)
{
    sqlite3_stmt *st = NULL;
    int rc = HF_EDB;
    *n = 0;
    if (sqlite3_prepare_v2(db, "SELECT count(*) FROM purge_queue", -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW) {
        *n = sqlite3_column_int64(st, 0);
        rc = 0;
    }
    sqlite3_finalize(st);
    return rc;
}
