/*
 * repl.c — the replication log's role, term, LSN and per-transaction
 * capture (see repl.h; docs/scheduler.md, "Replication").
 *
 * Invariants:
 *  - g.lsn is repl_state.lsn of the last transaction committed through a
 *    repl_conn with capture on; it and the ring change only under g.mu
 *    (the "repl_mu" of the design), held from the LSN bump through the
 *    COMMIT to the ring append, so the ring's order is the commit order.
 *    g.lsn is stored before the append: whoever sees frame N (a woken
 *    stream poll) also sees repl_lsn() >= N. A snapshot starts its read
 *    transaction under g.mu (repl_read_begin): its LSN <= repl_lsn() and
 *    every later frame is in the ring.
 *  - A writer holds SQLite's write lock (BEGIN IMMEDIATE) before it takes
 *    g.mu, and g.mu is only ever taken by writers that hold it or by
 *    nobody else that waits on SQLite: no lock-order cycle.
 *  - uncaptured counts the transactions that began without a session;
 *    repl_capture_enable returns only once it has fallen to 0 after
 *    capture was switched on (Dekker-style on sequentially consistent
 *    atomics: a begin increments then reads the flag, enable sets the
 *    flag then reads the count).
 * Workload: every write transaction of the scheduler passes here; with
 * capture off (no standby ever asked) that is two atomic operations.
 */
#ifndef SQLITE_ENABLE_SESSION
#define SQLITE_ENABLE_SESSION 1
#endif
#ifndef SQLITE_ENABLE_PREUPDATE_HOOK
#define SQLITE_ENABLE_PREUPDATE_HOOK 1
#endif
#include <sqlite3.h>

#include "scheduler/store/repl.h"
#include "scheduler/store/repl_int.h"

#include "hf_be.h"
#include "hf_err.h"
#include "hf_log.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static struct {
    pthread_mutex_t mu;            /* repl_mu: LSN bump + changeset + COMMIT + ring append */
    _Atomic int     role;
    _Atomic int     role_set;      /* repl_set_role was called (repl_start keeps it) */
    _Atomic int64_t term, lsn;
    _Atomic int     capture;
    _Atomic int     uncaptured;
    _Atomic int     uncaptured_writes;  /* a transaction without a session changed rows */
    char            path[4096];    /* the database (repl_start), for the gap of repl_capture_enable */
    _Atomic int     started;
    _Atomic int64_t fenced_total, escaped_total;
    pthread_mutex_t info_mu;       /* guards cluster, hint, vote */
    char            cluster[40];
    char            hint[512];
    repl_vote_fn   *vote;
} g = {.mu = PTHREAD_MUTEX_INITIALIZER, .info_mu = PTHREAD_MUTEX_INITIALIZER};

struct repl_conn {
    sqlite3          *db;
    sqlite3_session  *session;     /* between begin and commit/abort, capture on */
    sqlite3_stmt     *bump;        /* UPDATE repl_state SET lsn = lsn + 1 ... RETURNING lsn */
    int               uncaptured;  /* this transaction counts in g.uncaptured */
    sqlite3_int64     changes0;    /* sqlite3_total_changes64 at an uncaptured begin */
    int               committing;  /* inside repl_conn_commit: the commit hook expects it */
    /* metric rows this transaction logs itself (repl_conn_metric_*) */
    int               metrics_ok;  /* the metrics table has the columns the log writes (checked once) */
    int               metrics_how; /* this transaction: 0 not yet written, METRICS_LOGGED, METRICS_SESSION */
    uint8_t          *mbuf;        /* the table section: header, then one INSERT per row */
    size_t            mlen, mcap;
    int64_t           mrows;
};

#define METRICS_LOGGED  1
#define METRICS_SESSION 2

/* ---------- role, term, hints ---------- */

int repl_role(void) { return atomic_load(&g.role); }

void repl_set_role(int role)
{
    if (role != REPL_PRIMARY && role != REPL_STANDBY && role != REPL_FENCED) return;
    atomic_store(&g.role_set, 1);
    int was = atomic_exchange(&g.role, role);
    if (was != role) hf_info("replication: role %s -> %s", repl_role_name(was), repl_role_name(role));
}

const char *repl_role_name(int role)
{
    return role == REPL_STANDBY ? "standby" : role == REPL_FENCED ? "fenced" : "primary";
}

int64_t repl_term(void) { return atomic_load(&g.term); }
void    repl_set_term(int64_t t) { atomic_store(&g.term, t); }
int64_t repl_lsn(void) { return atomic_load(&g.lsn); }

void repl_cluster(char *buf, size_t n)
{
    pthread_mutex_lock(&g.info_mu);
    snprintf(buf, n, "%s", g.cluster);
    pthread_mutex_unlock(&g.info_mu);
}

void repl_observe_term(int64_t t)
{
    int64_t own = atomic_load(&g.term);
    if (t <= own || atomic_load(&g.role) != REPL_PRIMARY) return;
    int expect = REPL_PRIMARY;
    if (!atomic_compare_exchange_strong(&g.role, &expect, REPL_FENCED)) return;
    atomic_fetch_add(&g.fenced_total, 1);
    char detail[160];
    snprintf(detail, sizeof detail, "a request carried term %lld > this primary's %lld: fenced, every write refused",
             (long long)t, (long long)own);
    hf_warn("replication: %s", detail);
    repl_ring_event("FENCED", detail);
}

void repl_set_vote_hook(repl_vote_fn *fn)
{
    pthread_mutex_lock(&g.info_mu);
    g.vote = fn;
    pthread_mutex_unlock(&g.info_mu);
}

void repl_vote(const char *holder, int64_t agent_id, const char *name, int64_t lost_ms, int64_t term)
{
    pthread_mutex_lock(&g.info_mu);
    repl_vote_fn *fn = g.vote;
    pthread_mutex_unlock(&g.info_mu);
    if (fn && holder) fn(holder, agent_id, name, lost_ms, term);
}

void repl_set_primary_hint(const char *url)
{
    pthread_mutex_lock(&g.info_mu);
    snprintf(g.hint, sizeof g.hint, "%s", url ? url : "");
    pthread_mutex_unlock(&g.info_mu);
}

int repl_primary_hint(char *buf, size_t n)
{
    pthread_mutex_lock(&g.info_mu);
    snprintf(buf, n, "%s", g.hint);
    pthread_mutex_unlock(&g.info_mu);
    return buf[0] != 0;
}

int repl_mode_parse(const char *name, int *mode)
{
    if (name && strcmp(name, "sync") == 0) *mode = REPL_SYNC;
    else if (name && strcmp(name, "async") == 0) *mode = REPL_ASYNC;
    else return HF_EINVAL;
    return 0;
}

/* ---------- start, stop ---------- */

int repl_start(sqlite3 *db, const repl_config *cfg, char *err, size_t errlen)
{
    if (!cfg || cfg->standby_timeout_s < 1 || cfg->buffer_bytes < (1 << 20) ||
        (cfg->mode != REPL_SYNC && cfg->mode != REPL_ASYNC)) {
        snprintf(err, errlen, "replication: invalid configuration");
        return HF_EINVAL;
    }
    sqlite3_stmt *q = NULL;
    int rc = HF_EDB;
    if (sqlite3_prepare_v2(db, "SELECT term, lsn, cluster FROM repl_state WHERE id = 1", -1, &q, NULL) != SQLITE_OK ||
        sqlite3_step(q) != SQLITE_ROW) {
        snprintf(err, errlen, "replication: cannot read repl_state: %s", sqlite3_errmsg(db));
        goto end;
    }
    pthread_mutex_lock(&g.mu);
    atomic_store(&g.term, sqlite3_column_int64(q, 0));
    atomic_store(&g.lsn, sqlite3_column_int64(q, 1));
    pthread_mutex_lock(&g.info_mu);
    snprintf(g.cluster, sizeof g.cluster, "%s", (const char *)sqlite3_column_text(q, 2));
    pthread_mutex_unlock(&g.info_mu);
    if (!atomic_load(&g.role_set)) atomic_store(&g.role, REPL_PRIMARY);
    rc = repl_ring_reset(atomic_load(&g.lsn), cfg);
    atomic_store(&g.started, 1);
    const char *path = sqlite3_db_filename(db, "main");
    snprintf(g.path, sizeof g.path, "%s", path ? path : "");
    /* A database that was ever replicated (LSN > 0) may have a standby at
     * this LSN that will continue from it: every transaction from the
     * first must be in the log, so capture is on from the start. */
    if (atomic_load(&g.lsn) > 0) atomic_store(&g.capture, 1);
    pthread_mutex_unlock(&g.mu);
    hf_info("replication: term %lld, lsn %lld, mode %s, standby timeout %d s, ring %lld MiB",
            (long long)repl_term(), (long long)repl_lsn(), cfg->mode == REPL_SYNC ? "sync" : "async",
            cfg->standby_timeout_s, (long long)(cfg->buffer_bytes >> 20));
end:
    sqlite3_finalize(q);
    return rc;
}

void repl_stop(void)
{
    pthread_mutex_lock(&g.mu);
    atomic_store(&g.started, 0);
    atomic_store(&g.capture, 0);   /* the next repl_start decides again */
    atomic_store(&g.uncaptured_writes, 0);
    repl_ring_stop();
    pthread_mutex_unlock(&g.mu);
}

/* ---------- capture ---------- */

/* SQLite's commit hook of every captured connection: a write transaction
 * that commits outside repl_conn_commit while capture is on escaped the
 * log (its changes never reach the standby). Never vetoes the commit. */
static int commit_hook(void *arg)
{
    repl_conn *c = arg;
    if (!c->committing && atomic_load(&g.capture)) {
        atomic_fetch_add(&g.escaped_total, 1);
        hf_error("replication: a write committed outside the replication log (a bug): the standby misses it");
    }
    return 0;
}

/* The columns of metrics, in order, that repl_conn_metric_row writes
 * (schema/0001; seq the INTEGER PRIMARY KEY). Another layout (a later
 * migration) turns the logged path off: the session captures instead. */
static const char *const metric_cols[] = {"seq", "trial_id", "attempt", "name", "step", "epoch", "value", "time"};
#define METRIC_NCOL 8

static int metrics_layout_ok(sqlite3 *db)
{
    sqlite3_stmt *q = NULL;
    int n = 0, ok = 1;
    if (sqlite3_prepare_v2(db, "PRAGMA table_info(metrics)", -1, &q, NULL) != SQLITE_OK) return 0;
    while (sqlite3_step(q) == SQLITE_ROW) {
        const char *name = (const char *)sqlite3_column_text(q, 1);
        int pk = sqlite3_column_int(q, 5);
        if (n >= METRIC_NCOL || !name || strcmp(name, metric_cols[n]) || pk != (n == 0)) ok = 0;
        n++;
    }
    sqlite3_finalize(q);
    return ok && n == METRIC_NCOL;
}

repl_conn *repl_conn_new(sqlite3 *db)
{
    repl_conn *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->db = db;
    c->metrics_ok = metrics_layout_ok(db);
    sqlite3_commit_hook(db, commit_hook, c);
    return c;
}

int64_t repl_escaped_total(void) { return atomic_load(&g.escaped_total); }

static _Atomic int64_t metric_rows_logged;
int64_t repl_metric_rows_logged(void) { return atomic_load(&metric_rows_logged); }

static void conn_end(repl_conn *c)
{
    c->metrics_how = 0;
    c->mlen = 0;
    c->mrows = 0;
    if (c->session) sqlite3session_delete(c->session);
    c->session = NULL;
    if (c->uncaptured) atomic_fetch_sub(&g.uncaptured, 1);
    c->uncaptured = 0;
}

void repl_conn_free(repl_conn *c)
{
    if (!c) return;
    sqlite3_commit_hook(c->db, NULL, NULL);
    conn_end(c);
    sqlite3_finalize(c->bump);
    free(c->mbuf);
    free(c);
}

/* The session's table filter: metrics is left to the transaction's own
 * log when it asked for it before its first write there; otherwise the
 * session has it (and the log may not be used in this transaction). */
static int table_filter(void *arg, const char *table)
{
    repl_conn *c = arg;
    if (strcmp(table, "metrics")) return 1;
    if (c->metrics_how == METRICS_LOGGED) return 0;
    c->metrics_how = METRICS_SESSION;
    return 1;
}

int repl_conn_metric_log(repl_conn *c)
{
    if (!c || !c->session || !c->metrics_ok || c->metrics_how == METRICS_SESSION) return 0;
    c->metrics_how = METRICS_LOGGED;
    return 1;
}

int repl_conn_metric_session(repl_conn *c)
{
    if (!c || !c->session) return 0;
    if (c->metrics_how == METRICS_LOGGED) return HF_ESTATE;
    c->metrics_how = METRICS_SESSION;
    return 0;
}

static int mgrow(repl_conn *c, size_t more)
{
    if (c->mlen + more <= c->mcap) return 0;
    size_t cap = c->mcap ? c->mcap : 4096;
    while (cap < c->mlen + more) cap *= 2;
    uint8_t *g2 = realloc(c->mbuf, cap);
    if (!g2) return HF_ENOMEM;
    c->mbuf = g2;
    c->mcap = cap;
    return 0;
}

/* SQLite's varint (sqlite3PutVarint), as changesets use it. */
static void mput_varint(repl_conn *c, uint64_t v)
{
    uint8_t b[10];
    int n = 0;
    if (v & ((uint64_t)0xff000000 << 32)) {
        b[8] = (uint8_t)v;
        v >>= 8;
        for (int i = 7; i >= 0; i--) {
            b[i] = (uint8_t)((v & 0x7f) | 0x80);
            v >>= 7;
        }
        memcpy(c->mbuf + c->mlen, b, 9);
        c->mlen += 9;
        return;
    }
    do {
        b[n++] = (uint8_t)((v & 0x7f) | 0x80);
        v >>= 7;
    } while (v);
    b[0] &= 0x7f;
    for (int i = n - 1; i >= 0; i--) c->mbuf[c->mlen++] = b[i];
}

static void mput_u64(repl_conn *c, uint64_t v)
{
    hf_be_put(c->mbuf + c->mlen, v, 8);
    c->mlen += 8;
}

static void mput_int(repl_conn *c, int64_t v)
{
    c->mbuf[c->mlen++] = SQLITE_INTEGER;
    mput_u64(c, (uint64_t)v);
}

static void mput_real(repl_conn *c, double v)
{
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    c->mbuf[c->mlen++] = SQLITE_FLOAT;
    mput_u64(c, u);
}

int repl_conn_metric_row(repl_conn *c, const repl_metric_row *r)
{
    if (!c || c->metrics_how != METRICS_LOGGED) return HF_ESTATE;
    size_t nlen = strlen(r->name);
    /* header once; a row: op, indirect, 7 numbers of 9 bytes, the name */
    if (mgrow(c, 32 + 7 * 9 + 10 + nlen)) return HF_ENOMEM;
    if (c->mrows == 0) {
        c->mbuf[c->mlen++] = 'T';
        mput_varint(c, METRIC_NCOL);
        for (int i = 0; i < METRIC_NCOL; i++) c->mbuf[c->mlen++] = i == 0;
        memcpy(c->mbuf + c->mlen, "metrics", 8);   /* with its NUL */
        c->mlen += 8;
    }
    c->mbuf[c->mlen++] = SQLITE_INSERT;
    c->mbuf[c->mlen++] = 0;   /* not indirect */
    mput_int(c, r->seq);
    mput_int(c, r->trial_id);
    mput_int(c, r->attempt);
    c->mbuf[c->mlen++] = SQLITE_TEXT;
    mput_varint(c, nlen);
    memcpy(c->mbuf + c->mlen, r->name, nlen);
    c->mlen += nlen;
    if (r->has_step) mput_int(c, r->step);
    else c->mbuf[c->mlen++] = SQLITE_NULL;
    if (r->has_epoch) mput_real(c, r->epoch);
    else c->mbuf[c->mlen++] = SQLITE_NULL;
    mput_real(c, r->value);
    mput_int(c, r->time);
    c->mrows++;
    return 0;
}

void repl_conn_abort(repl_conn *c)
{
    if (c) conn_end(c);
}

int repl_conn_begin(repl_conn *c)
{
    conn_end(c);   /* a previous transaction's leftovers, if its caller forgot */
    if (!atomic_load(&g.capture)) {
        atomic_fetch_add(&g.uncaptured, 1);
        if (!atomic_load(&g.capture)) {
            c->uncaptured = 1;
            c->changes0 = sqlite3_total_changes64(c->db);
            return 0;
        }
        atomic_fetch_sub(&g.uncaptured, 1);
    }
    if (sqlite3session_create(c->db, "main", &c->session) != SQLITE_OK) {
        c->session = NULL;
        hf_warn("replication: cannot create a session: %s", sqlite3_errmsg(c->db));
        return HF_ENOMEM;
    }
    sqlite3session_table_filter(c->session, table_filter, c);
    if (sqlite3session_attach(c->session, NULL) != SQLITE_OK) {
        hf_warn("replication: cannot attach a session: %s", sqlite3_errmsg(c->db));
        conn_end(c);
        return HF_EDB;
    }
    return 0;
}

/* Inside the transaction, holding g.mu: bump repl_state.lsn and check it
 * is the next LSN. RET 0 with *lsn, or HF_EDB. */
static int bump_lsn(repl_conn *c, int64_t *lsn)
{
    if (!c->bump && sqlite3_prepare_v3(c->db, "UPDATE repl_state SET lsn = lsn + 1 WHERE id = 1 RETURNING lsn", -1,
                                       SQLITE_PREPARE_PERSISTENT, &c->bump, NULL) != SQLITE_OK) {
        hf_warn("replication: %s", sqlite3_errmsg(c->db));
        return HF_EDB;
    }
    int rc = sqlite3_step(c->bump);
    if (rc == SQLITE_ROW) *lsn = sqlite3_column_int64(c->bump, 0);
    int rc2 = sqlite3_reset(c->bump);
    if (rc != SQLITE_ROW || rc2 != SQLITE_OK) {
        hf_warn("replication: LSN bump: %s", sqlite3_errmsg(c->db));
        return rc2 == SQLITE_FULL ? HF_ENOSPC : HF_EDB;
    }
    if (*lsn != atomic_load(&g.lsn) + 1)   /* another writer bypassed the log: the standby will re-bootstrap */
        hf_warn("replication: LSN %lld follows %lld", (long long)*lsn, (long long)atomic_load(&g.lsn));
    return 0;
}

int repl_conn_commit(repl_conn *c, int (*commit)(void *arg), void *arg)
{
    c->committing = 1;
    if (!c->session || (sqlite3session_isempty(c->session) && c->mrows == 0)) {
        int rc = commit(arg);
        if (rc == 0 && c->uncaptured && sqlite3_total_changes64(c->db) != c->changes0)
            atomic_store(&g.uncaptured_writes, 1);
        c->committing = 0;
        conn_end(c);
        return rc;
    }
    void *cs = NULL;
    int n = 0;
    int64_t lsn = 0;
    pthread_mutex_lock(&g.mu);
    int rc = bump_lsn(c, &lsn);
    if (rc == 0 && sqlite3session_changeset(c->session, &n, &cs) != SQLITE_OK) {
        hf_warn("replication: cannot take the changeset: %s", sqlite3_errmsg(c->db));
        rc = HF_ENOMEM;
    }
    if (rc == 0 && c->mrows > 0) {
        /* the logged metric rows: one more table section, after the
         * session's (a changeset is a sequence of table sections) */
        void *all = sqlite3_malloc64((sqlite3_uint64)n + c->mlen);
        if (!all) rc = HF_ENOMEM;
        else {
            if (n) memcpy(all, cs, (size_t)n);
            memcpy((uint8_t *)all + n, c->mbuf, c->mlen);
            sqlite3_free(cs);
            cs = all;
            n += (int)c->mlen;
        }
    }
    if (rc == 0) rc = commit(arg);
    if (rc == 0) {
        /* g.lsn before the ring: the append wakes stream polls, and a
         * standby that applied this frame asks after= it at once; the
         * stream's "ahead" check (after > repl_lsn()) must not see the
         * old LSN then (a 409 and a needless re-bootstrap). */
        atomic_store(&g.lsn, lsn);
        atomic_fetch_add(&metric_rows_logged, c->mrows);
        if (atomic_load(&g.started)) repl_ring_append(lsn, atomic_load(&g.term), cs, n);
        else sqlite3_free(cs);
        cs = NULL;
    }
    pthread_mutex_unlock(&g.mu);
    c->committing = 0;
    sqlite3_free(cs);
    conn_end(c);
    return rc;
}

static int sql_rc(int src)
{
    return src == SQLITE_OK ? 0 : (src & 0xff) == SQLITE_FULL ? HF_ENOSPC : (src & 0xff) == SQLITE_NOMEM ? HF_ENOMEM : HF_EDB;
}

int repl_txn_begin(repl_conn *c)
{
    int src = sqlite3_exec(c->db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
    if (src != SQLITE_OK) {
        hf_warn("BEGIN IMMEDIATE: %s", sqlite3_errmsg(c->db));
        return sql_rc(src);
    }
    int rc = repl_conn_begin(c);
    if (rc) repl_txn_rollback(c);
    return rc;
}

static _Thread_local char last_msg[200];
static _Thread_local int last_code;

const char *repl_errmsg(void) { return last_msg; }

/* Keep the connection's code and message before a ROLLBACK clears them. */
static void keep_error(sqlite3 *db)
{
    last_code = sqlite3_extended_errcode(db);
    snprintf(last_msg, sizeof last_msg, "%s", sqlite3_errmsg(db));
}

static int commit_exec(void *arg)
{
    sqlite3 *db = arg;
    int src = sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
    if (src != SQLITE_OK) {
        keep_error(db);
        hf_warn("COMMIT: %s", last_msg);
    }
    return sql_rc(src);
}

int repl_step1(repl_conn *c, sqlite3_stmt *st)
{
    last_msg[0] = 0;
    last_code = SQLITE_ERROR;
    int src = sqlite3_exec(c->db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
    if (src != SQLITE_OK) {
        keep_error(c->db);
        return last_code;
    }
    if (repl_conn_begin(c)) {
        snprintf(last_msg, sizeof last_msg, "cannot start the replication session");
        repl_txn_rollback(c);
        return SQLITE_NOMEM;
    }
    src = sqlite3_step(st);
    if (src != SQLITE_DONE) {
        keep_error(c->db);
        sqlite3_reset(st);
        repl_txn_rollback(c);
        return last_code == SQLITE_OK ? SQLITE_ERROR : last_code;
    }
    last_code = SQLITE_ERROR;
    int rc = repl_txn_commit(c);
    if (rc == 0) return SQLITE_DONE;
    if (!last_msg[0]) snprintf(last_msg, sizeof last_msg, "%s", hf_strerror(rc));
    return rc == HF_ENOSPC ? SQLITE_FULL : last_code;
}

int repl_txn_commit(repl_conn *c)
{
    int rc = repl_conn_commit(c, commit_exec, c->db);
    if (rc) repl_txn_rollback(c);
    return rc;
}

void repl_txn_rollback(repl_conn *c)
{
    if (!sqlite3_get_autocommit(c->db)) sqlite3_exec(c->db, "ROLLBACK", NULL, NULL, NULL);
    repl_conn_abort(c);
}

/* Rows changed while capture was off are in no frame, yet repl_state.lsn
 * did not move: a standby holding a copy at this LSN (one that followed
 * an earlier run of this database) would carry on without them. One
 * transaction on its own connection moves the LSN past them instead (a
 * gap no frame fills), so such a standby is answered "gone" (410) and
 * bootstraps, while a snapshot taken from now on holds the gap's LSN and
 * follows on. RET 0 or HF_EDB (logged; the flag is set again). */
static int capture_gap(void)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    int rc = HF_EDB;
    if (sqlite3_open_v2(g.path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK) goto end;
    sqlite3_busy_timeout(db, 10000);
    if (sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db, "UPDATE repl_state SET lsn = lsn + 1 WHERE id = 1 RETURNING lsn", -1, &st, NULL) !=
            SQLITE_OK ||
        sqlite3_step(st) != SQLITE_ROW)
        goto end;
    int64_t lsn = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    st = NULL;
    pthread_mutex_lock(&g.mu);   /* write lock, then repl_mu: the writers' order */
    if (sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) == SQLITE_OK) {
        atomic_store(&g.lsn, lsn);
        repl_ring_skip(lsn);
        rc = 0;
    }
    pthread_mutex_unlock(&g.mu);
    if (rc == 0) hf_info("replication: LSN %lld marks the writes made before capture", (long long)lsn);
end:
    if (rc) hf_warn("replication: cannot mark the uncaptured writes: %s", db ? sqlite3_errmsg(db) : "no memory");
    sqlite3_finalize(st);
    if (db && !sqlite3_get_autocommit(db)) sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
    sqlite3_close_v2(db);
    return rc;
}

void repl_capture_enable(void)
{
    if (!atomic_exchange(&g.capture, 1)) hf_info("replication: capture on (a standby asked)");
    struct timespec ms = {0, 1000000};
    while (atomic_load(&g.uncaptured) > 0) nanosleep(&ms, NULL);
    if (atomic_exchange(&g.uncaptured_writes, 0) && capture_gap()) atomic_store(&g.uncaptured_writes, 1);
}

int repl_capture_on(void) { return atomic_load(&g.capture); }

int repl_read_begin(sqlite3 *db, const char *sql)
{
    /* A reader never waits on SQLite's write lock (WAL), so taking repl_mu
     * here, whose holders hold that lock, cannot deadlock. */
    pthread_mutex_lock(&g.mu);
    int src = sqlite3_exec(db, sql, NULL, NULL, NULL);
    pthread_mutex_unlock(&g.mu);
    return src;
}

void repl_status_get(repl_status *st)
{
    memset(st, 0, sizeof *st);
    st->role = repl_role();
    st->term = repl_term();
    st->lsn = repl_lsn();
    repl_cluster(st->cluster, sizeof st->cluster);
    st->capture = repl_capture_on();
    st->fenced_total = atomic_load(&g.fenced_total);
    repl_ring_status(st);
}
