/*
 * standby_apply.c — the standby's writes to its replica (docs/scheduler.md,
 * "Standby and failover"): applying the primary's changesets (from the
 * spool: standby_spool_apply, and at start standby_spool_catch_up), and
 * the one transaction of a promotion.
 *
 * Each connection opened here is one thread's alone (the apply thread
 * "hf-sb-apply"; "hf-standby" for promotion; the start-up's catch-up):
 * WAL, synchronous=FULL (an applied LSN is on disk), triggers off (the
 * changes their firing made on the primary are in the changesets
 * already: firing them again would double them), foreign keys off (a
 * changeset is ordered by table, not by dependency; the primary checked
 * them). Each take of the spool (whole answers) is one transaction: the changesets are
 * applied with SQLITE_CHANGESETAPPLY_NOSAVEPOINT inside our BEGIN
 * IMMEDIATE, and any conflict aborts and rolls everything back — the
 * replica is not the primary's past, which only a new bootstrap mends.
 */
#ifndef SQLITE_ENABLE_SESSION
#define SQLITE_ENABLE_SESSION 1
#endif
#ifndef SQLITE_ENABLE_PREUPDATE_HOOK
#define SQLITE_ENABLE_PREUPDATE_HOOK 1
#endif
#include "scheduler/standby/standby.h"

#include "hf_err.h"
#include "hf_log.h"
#include "hf_time.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int exec1(sqlite3 *db, const char *sql, char *err, size_t errlen)
{
    if (sqlite3_exec(db, sql, NULL, NULL, NULL) == SQLITE_OK) return 0;
    snprintf(err, errlen, "%s: %s", sql, sqlite3_errmsg(db));
    return HF_EDB;
}

/* Column number of col in table (PRAGMA table_info), or -1. */
static int column_of(sqlite3 *db, const char *table, const char *col)
{
    sqlite3_stmt *q = NULL;
    int found = -1;
    char sql[128];
    snprintf(sql, sizeof sql, "PRAGMA table_info(%s)", table);
    if (sqlite3_prepare_v2(db, sql, -1, &q, NULL) != SQLITE_OK) return -1;
    while (sqlite3_step(q) == SQLITE_ROW)
        if (!strcmp((const char *)sqlite3_column_text(q, 1) ?: "", col)) found = sqlite3_column_int(q, 0);
    sqlite3_finalize(q);
    return found;
}

int standby_apply_open(const char *db, sqlite3 **out, standby_cols *cols, char *err, size_t errlen)
{
    sqlite3 *h = NULL;
    int rc;
    *out = NULL;
    if (sqlite3_open_v2(db, &h, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK) {
        snprintf(err, errlen, "cannot open %s: %s", db, h ? sqlite3_errmsg(h) : "out of memory");
        sqlite3_close_v2(h);
        return HF_EDB;
    }
    sqlite3_busy_timeout(h, 5000);
    if ((rc = exec1(h, "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; PRAGMA foreign_keys=OFF", err, errlen))) {
        sqlite3_close_v2(h);
        return rc;
    }
    if (sqlite3_db_config(h, SQLITE_DBCONFIG_ENABLE_TRIGGER, 0, NULL) != SQLITE_OK) {
        snprintf(err, errlen, "cannot turn triggers off: %s", sqlite3_errmsg(h));
        sqlite3_close_v2(h);
        return HF_EDB;
    }
    cols->ck_sha = column_of(h, "checkpoints", "sha256");
    cols->ck_size = column_of(h, "checkpoints", "size");
    cols->cx_sha = column_of(h, "contexts", "sha256");
    cols->cx_size = column_of(h, "contexts", "size");
    *out = h;
    return 0;
}

int standby_apply_state(sqlite3 *db, int64_t *term, int64_t *lsn, char *cluster, size_t clusterlen)
{
    sqlite3_stmt *q = NULL;
    int rc = HF_EDB;
    if (sqlite3_prepare_v2(db, "SELECT term, lsn, cluster FROM repl_state WHERE id = 1", -1, &q, NULL) == SQLITE_OK &&
        sqlite3_step(q) == SQLITE_ROW) {
        *term = sqlite3_column_int64(q, 0);
        *lsn = sqlite3_column_int64(q, 1);
        snprintf(cluster, clusterlen, "%s", (const char *)sqlite3_column_text(q, 2) ?: "");
        rc = 0;
    }
    sqlite3_finalize(q);
    return rc;
}

typedef struct apply_ctx {
    int  conflicts;
    char what[160];
} apply_ctx;

/* Any conflict is divergence: note the first, abort the apply. */
static int on_conflict(void *ud, int kind, sqlite3_changeset_iter *it)
{
    apply_ctx *a = ud;
    const char *tab = "?";
    int ncol, op, ind;
    sqlite3changeset_op(it, &tab, &ncol, &op, &ind);
    if (!a->conflicts++)
        snprintf(a->what, sizeof a->what, "conflict %d on table %s (op %d)", kind, tab, op);
    return SQLITE_CHANGESET_ABORT;
}

int standby_apply_frames(sqlite3 *db, const uint8_t *buf, size_t n, char *err, size_t errlen)
{
    size_t off = 0;
    standby_frame f;
    apply_ctx a = {0};
    int rc, r;
    if ((rc = exec1(db, "BEGIN IMMEDIATE", err, errlen))) return rc;
    while ((r = standby_frame_next(buf, n, &off, &f)) == 1) {
        int src = sqlite3changeset_apply_v2(db, (int)f.len, (void *)f.data, NULL, on_conflict, &a, NULL, NULL,
                                            SQLITE_CHANGESETAPPLY_NOSAVEPOINT);
        if (a.conflicts) {
            snprintf(err, errlen, "lsn %lld: %s: the replica diverged from the primary", (long long)f.lsn, a.what);
            rc = HF_ECORRUPT;
            goto fail;
        }
        if (src != SQLITE_OK) {
            snprintf(err, errlen, "lsn %lld: applying its changeset: %s", (long long)f.lsn, sqlite3_errmsg(db));
            rc = src == SQLITE_CORRUPT || src == SQLITE_MISUSE ? HF_EPARSE : HF_EDB;
            goto fail;
        }
    }
    if (r < 0) { snprintf(err, errlen, "a malformed frame"); rc = HF_EPARSE; goto fail; }
    if ((rc = exec1(db, "COMMIT", err, errlen))) goto fail;
    return 0;
fail:
    sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
    return rc;
}

int64_t standby_apply_object_size(sqlite3 *db, const char *sha256)
{
    sqlite3_stmt *q = NULL;
    int64_t size = -1;
    if (sqlite3_prepare_v2(db, "SELECT size FROM checkpoints WHERE sha256 = ?1 AND size IS NOT NULL UNION ALL "
                               "SELECT size FROM contexts WHERE sha256 = ?1 LIMIT 1", -1, &q, NULL) == SQLITE_OK) {
        sqlite3_bind_text(q, 1, sha256, -1, SQLITE_STATIC);
        if (sqlite3_step(q) == SQLITE_ROW) size = sqlite3_column_int64(q, 0);
    }
    sqlite3_finalize(q);
    return size;
}

int standby_apply_promote(sqlite3 *db, const char *by, int64_t *term, char *err, size_t errlen)
{
    sqlite3_stmt *q = NULL;
    int rc;
    if ((rc = exec1(db, "BEGIN IMMEDIATE; UPDATE repl_state SET term = term + 1 WHERE id = 1", err, errlen))) goto fail;
    if (sqlite3_prepare_v2(db, "INSERT INTO repl_terms(term, start_lsn, started_at, by) SELECT term, lsn, ?1, ?2 "
                               "FROM repl_state WHERE id = 1 RETURNING term", -1, &q, NULL) != SQLITE_OK) {
        snprintf(err, errlen, "promote: %s", sqlite3_errmsg(db));
        rc = HF_EDB;
        goto fail;
    }
    sqlite3_bind_int64(q, 1, hf_wall_ms());
    sqlite3_bind_text(q, 2, by ? by : "admin", -1, SQLITE_TRANSIENT);
    if (sqlite3_step(q) != SQLITE_ROW) {
        snprintf(err, errlen, "promote: %s", sqlite3_errmsg(db));
        rc = HF_EDB;
        goto fail;
    }
    *term = sqlite3_column_int64(q, 0);
    sqlite3_finalize(q);
    q = NULL;
    if ((rc = exec1(db, "COMMIT", err, errlen))) goto fail;
    hf_info("standby: promoted: term %lld", (long long)*term);
    return 0;
fail:
    sqlite3_finalize(q);
    sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
    return rc;
}

/* ---------- applying it ---------- */

/* Apply the frames of buf after *lsn to db in one transaction (a record
 * may begin at or below it only after a crash between the apply's commit
 * and the spool's mark); *lsn becomes the replica's. RET the number of
 * frames applied (0: none were new), HF_ECORRUPT (divergence, a
 * malformed frame), HF_E*. */
int standby_spool_apply(sqlite3 *db, const uint8_t *buf, size_t n, int64_t *lsn, size_t *start, char *err,
                        size_t errlen)
{
    size_t off = 0;
    standby_frame f;
    int r, nf = 0, rc;
    *start = 0;
    while ((r = standby_frame_next(buf, n, &off, &f)) == 1) {
        if (f.lsn <= *lsn) *start = off;
        else nf++;
    }
    if (r < 0) { snprintf(err, errlen, "a malformed frame in the spool"); return HF_ECORRUPT; }
    if (!nf) return 0;
    if ((rc = standby_apply_frames(db, buf + *start, n - *start, err, errlen))) return rc;
    int64_t t, l;
    char cl[80];
    if (standby_apply_state(db, &t, &l, cl, sizeof cl) == 0) *lsn = l;
    return nf;
}

/* At start, before anything reads or migrates the replica: apply what
 * its spool holds past it (acknowledged, not applied when the process
 * ended), so the replica is whole at its own schema version — an
 * upgraded binary then migrates a complete replica, never applies old
 * frames to a new schema. RET 0 or HF_E* (err). */
int standby_spool_catch_up(const char *db, char *err, size_t errlen)
{
    int64_t term = 0, lsn = 0;
    char cl[80];
    if (access(db, F_OK) != 0) return 0;
    sqlite3 *h = NULL;
    standby_cols cols;
    standby_spool *sp = NULL;
    int rc = standby_apply_open(db, &h, &cols, err, errlen);
    if (!rc && standby_apply_state(h, &term, &lsn, cl, sizeof cl)) {   /* not a replica (yet): nothing to apply */
        sqlite3_close_v2(h);
        return 0;
    }
    if (!rc) rc = standby_spool_open(db, lsn, term, &sp, err, errlen);
    int64_t from = lsn;
    while (!rc && standby_spool_pending(sp)) {
        uint8_t *buf = NULL;
        size_t n = 0, start = 0;
        int64_t mark = 0;
        rc = standby_spool_take(sp, 0, STANDBY_APPLY_MAX, &buf, &n, &mark);
        if (!rc && n) {
            int nf = standby_spool_apply(h, buf, n, &lsn, &start, err, errlen);
            rc = nf < 0 ? nf : 0;
        }
        free(buf);
        if (!rc) standby_spool_applied(sp, mark);
    }
    if (!rc && lsn > from) hf_info("standby: applied lsn %lld..%lld from the spool", (long long)from + 1, (long long)lsn);
    standby_spool_close(sp);
    sqlite3_close_v2(h);
    return rc;
}
