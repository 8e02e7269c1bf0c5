/*
 * test_scheduler_standby.c — the standby's pure parts
 * (scheduler/standby/standby.h; docs/scheduler.md "Standby and failover"):
 *
 *   - the frame decoder, table-driven: whole frames decode; a truncated
 *     header or body, flags != 0, a length over the bound and an lsn over
 *     INT64_MAX are refused; an answer with a gap, a repeat, another term
 *     or no frame is refused by standby_frames_check;
 *   - applying real session changesets to a replica: the rows arrive, a
 *     trigger's own changes are not doubled (triggers off), the objects a
 *     changeset inserts into checkpoints/contexts are named with their
 *     sizes, and a frame applied twice is a conflict (HF_ECORRUPT) that
 *     leaves the replica as it was;
 *   - promotion's transaction: term + 1 and a repl_terms row;
 *   - the witness rule: a strict majority of the live agents, votes only
 *     when recent, long enough lost and of the standby's term; agents not
 *     live (LOST, or last seen over a minute before the newest) do not
 *     count; no live agent, no promotion;
 *   - the re-exec's argument edit;
 *   - the spool: order, reopen, a torn or corrupt tail, applied records
 *     skipped, another term dropped, emptied once applied.
 */
#define SQLITE_ENABLE_SESSION 1
#define SQLITE_ENABLE_PREUPDATE_HOOK 1
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "hf_err.h"
#include "hf_time.h"
#include "scheduler/standby/standby.h"
#include "unit_fixture.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[256];
static int setup(void **st) { (void)st; return unit_tmpdir(dir, sizeof dir, "standby"); }
static int teardown(void **st) { (void)st; return unit_rmtree(dir); }

/* Append a frame to buf at *n. */
static void put_frame(uint8_t *buf, size_t *n, uint64_t lsn, uint64_t term, uint32_t flags, uint32_t len,
                      const void *data, size_t have)
{
    uint8_t *p = buf + *n;
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(lsn >> (56 - 8 * i));
    for (int i = 0; i < 8; i++) p[8 + i] = (uint8_t)(term >> (56 - 8 * i));
    for (int i = 0; i < 4; i++) p[16 + i] = (uint8_t)(flags >> (24 - 8 * i));
    for (int i = 0; i < 4; i++) p[20 + i] = (uint8_t)(len >> (24 - 8 * i));
    if (have) memcpy(p + 24, data, have);
    *n += 24 + have;
}

static void test_frames(void **st)
{
    (void)st;
    static uint8_t buf[4096];
    size_t n = 0, off = 0;
    standby_frame f;
    put_frame(buf, &n, 5, 2, 0, 5, "T\x01\x01t", 5);   /* a table header, no change */
    put_frame(buf, &n, 6, 2, 0, 0, NULL, 0);
    assert_int_equal(standby_frame_next(buf, n, &off, &f), 1);
    assert_int_equal(f.lsn, 5);
    assert_int_equal(f.term, 2);
    assert_int_equal(f.len, 5);
    assert_memory_equal(f.data, "T\x01\x01t", 5);
    assert_int_equal(standby_frame_next(buf, n, &off, &f), 1);
    assert_int_equal(f.lsn, 6);
    assert_int_equal(standby_frame_next(buf, n, &off, &f), 0);
    char err[200];
    assert_int_equal(standby_frames_check(buf, n, 4, 2, err, sizeof err), 2);
    assert_int_equal(standby_frames_check(buf, n, 3, 2, err, sizeof err), HF_ESTATE);   /* a gap */
    assert_int_equal(standby_frames_check(buf, n, 5, 2, err, sizeof err), HF_ESTATE);   /* a repeat */
    assert_int_equal(standby_frames_check(buf, n, 4, 1, err, sizeof err), HF_ESTATE);   /* another term */
    assert_int_equal(standby_frames_check(buf, 0, 4, 2, err, sizeof err), HF_EPARSE);   /* nothing */
    /* Malformed changesets (SQLite's own iterator spins on the first two). */
    const struct { const char *cs; size_t n; } badcs[] = {
        {"T\x01", 2}, {"T\x01\x01t", 4}, {"T\x01\x01t\0\x12\0\x03\x09" "ab", 10}, {"\x12\0\x05", 3}, {"T\x01\x01t\0\x63\0", 7},
    };
    for (size_t i = 0; i < sizeof badcs / sizeof badcs[0]; i++) {
        size_t m = 0;
        put_frame(buf, &m, 1, 1, 0, (uint32_t)badcs[i].n, badcs[i].cs, badcs[i].n);
        assert_int_equal(standby_changeset_valid(badcs[i].cs, badcs[i].n), HF_EPARSE);
        assert_int_equal(standby_frames_check(buf, m, 0, 1, err, sizeof err), HF_EPARSE);
    }
    assert_int_equal(standby_changeset_valid("T\x01\x01t\0\x12\0\x03\x02" "ab", 11), 0);
    n = 0;
    put_frame(buf, &n, 5, 2, 0, 5, "T\x01\x01t", 5);
    put_frame(buf, &n, 6, 2, 0, 0, NULL, 0);

    struct { uint64_t lsn; uint32_t flags, len; size_t have, cut; } bad[] = {
        {1, 0, 10, 10, 5},                  /* body cut short */
        {1, 0, 0, 0, 30},                   /* header cut short (cut beyond: see below) */
        {1, 1, 0, 0, 0},                    /* flags */
        {(uint64_t)INT64_MAX + 1, 0, 0, 0, 0},  /* lsn */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        size_t m = 0;
        off = 0;
        put_frame(buf, &m, bad[i].lsn, 1, bad[i].flags, bad[i].len, "0123456789", bad[i].have);
        if (bad[i].cut == 30) m = 20;
        else if (bad[i].cut) m -= bad[i].cut;
        assert_int_equal(standby_frame_next(buf, m, &off, &f), HF_EPARSE);
    }
    /* A well-formed header over the bound: HF_ETOOBIG (the standby
     * bootstraps instead), also after frames that were fine. */
    size_t m = 0;
    off = 0;
    put_frame(buf, &m, 5, 2, 0, 5, "T\x01\x01t", 5);
    put_frame(buf, &m, 6, 2, 0, STANDBY_FRAME_MAX + 1, NULL, 0);
    assert_int_equal(standby_frame_next(buf, m, &off, &f), 1);
    assert_int_equal(standby_frame_next(buf, m, &off, &f), HF_ETOOBIG);
    assert_int_equal(standby_frames_check(buf, m, 4, 2, err, sizeof err), HF_ETOOBIG);
    assert_non_null(strstr(err, "after lsn 5 is larger than a standby takes"));
    m = 0;
    put_frame(buf, &m, 5, 2, 0, STANDBY_FRAME_MAX, NULL, 0);   /* at the bound: only cut short */
    off = 0;
    assert_int_equal(standby_frame_next(buf, m, &off, &f), HF_EPARSE);
}

static sqlite3 *open_db(const char *name)
{
    char path[512];
    sqlite3 *db = NULL;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db,
        "PRAGMA journal_mode=WAL;"
        "CREATE TABLE IF NOT EXISTS repl_state(id INTEGER PRIMARY KEY CHECK (id = 1), term INTEGER NOT NULL,"
        " lsn INTEGER NOT NULL, cluster TEXT NOT NULL);"
        "INSERT OR IGNORE INTO repl_state VALUES (1, 1, 0, 'c1');"
        "CREATE TABLE IF NOT EXISTS repl_terms(term INTEGER PRIMARY KEY, start_lsn INTEGER NOT NULL,"
        " started_at INTEGER NOT NULL, by TEXT NOT NULL);"
        "CREATE TABLE IF NOT EXISTS checkpoints(id INTEGER PRIMARY KEY, trial_id INTEGER, path TEXT,"
        " sha256 TEXT, size INTEGER);"
        "CREATE TABLE IF NOT EXISTS contexts(id INTEGER PRIMARY KEY, sha256 TEXT NOT NULL, size INTEGER NOT NULL);"
        "CREATE TABLE IF NOT EXISTS t(id INTEGER PRIMARY KEY, v TEXT);"
        "CREATE TABLE IF NOT EXISTS tlog(id INTEGER PRIMARY KEY, v TEXT);"
        "CREATE TRIGGER IF NOT EXISTS t_log AFTER INSERT ON t BEGIN INSERT INTO tlog(v) VALUES (NEW.v); END;",
        NULL, NULL, NULL), SQLITE_OK);
    return db;
}

static int64_t one(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *q;
    int64_t v = -1;
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &q, NULL), SQLITE_OK);
    if (sqlite3_step(q) == SQLITE_ROW) v = sqlite3_column_int64(q, 0);
    sqlite3_finalize(q);
    return v;
}

typedef struct seen { int n; standby_object o[4]; } seen;
static int on_object(void *ctx, const standby_object *o)
{
    seen *s = ctx;
    if (s->n < 4) s->o[s->n] = *o;
    s->n++;
    return 0;
}

#define HASH_A "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define HASH_B "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"

static void test_apply(void **st)
{
    (void)st;
    sqlite3 *prim = open_db("primary.db"), *rep0 = open_db("replica.db");
    sqlite3_close(rep0);
    /* One primary transaction under a session, as the replication log takes it. */
    sqlite3_session *ses;
    assert_int_equal(sqlite3session_create(prim, "main", &ses), SQLITE_OK);
    assert_int_equal(sqlite3session_attach(ses, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_exec(prim,
        "BEGIN; INSERT INTO t(v) VALUES ('x');"
        "INSERT INTO checkpoints(trial_id, path, sha256, size) VALUES (1, 'p', '" HASH_B "', 42);"
        "INSERT INTO contexts(sha256, size) VALUES ('" HASH_B "', 7);"
        "INSERT INTO checkpoints(trial_id, path, sha256, size) VALUES (1, 'q', 'not-a-hash', 1);"
        "UPDATE repl_state SET lsn = lsn + 1 WHERE id = 1;", NULL, NULL, NULL), SQLITE_OK);
    int len = 0;
    void *cs = NULL;
    assert_int_equal(sqlite3session_changeset(ses, &len, &cs), SQLITE_OK);
    assert_int_equal(sqlite3_exec(prim, "COMMIT", NULL, NULL, NULL), SQLITE_OK);
    sqlite3session_delete(ses);
    assert_int_equal(one(prim, "SELECT COUNT(*) FROM tlog"), 1);

    char path[512], err[256];
    snprintf(path, sizeof path, "%s/replica.db", dir);
    sqlite3 *rep;
    standby_cols cols;
    assert_int_equal(standby_apply_open(path, &rep, &cols, err, sizeof err), 0);
    assert_int_equal(cols.ck_sha, 3);
    assert_int_equal(cols.cx_size, 2);
    seen s = {0};
    assert_int_equal(standby_changeset_objects(cs, len, &cols, on_object, &s), 0);
    assert_int_equal(s.n, 2);   /* the invalid hash is not named */
    assert_string_equal(s.o[0].sha256, HASH_B);
    assert_true((s.o[0].size == 42 && s.o[1].size == 7) || (s.o[0].size == 7 && s.o[1].size == 42));

    static uint8_t buf[65536];
    size_t n = 0;
    assert_true(len < 60000);
    put_frame(buf, &n, 1, 1, 0, (uint32_t)len, cs, (size_t)len);
    assert_int_equal(standby_frames_check(buf, n, 0, 1, err, sizeof err), 1);
    assert_int_equal(standby_apply_frames(rep, buf, n, err, sizeof err), 0);
    assert_int_equal(one(rep, "SELECT COUNT(*) FROM t"), 1);
    assert_int_equal(one(rep, "SELECT COUNT(*) FROM tlog"), 1);   /* not 2: triggers are off */
    assert_int_equal(one(rep, "SELECT COUNT(*) FROM checkpoints"), 2);
    assert_int_equal(standby_apply_object_size(rep, HASH_B), 42);
    assert_int_equal(standby_apply_object_size(rep, HASH_A), -1);
    int64_t term, lsn;
    char cl[80];
    assert_int_equal(standby_apply_state(rep, &term, &lsn, cl, sizeof cl), 0);
    assert_int_equal(lsn, 1);

    /* The same frame again: its inserts conflict; nothing changes. */
    assert_int_equal(standby_apply_frames(rep, buf, n, err, sizeof err), HF_ECORRUPT);
    assert_int_equal(one(rep, "SELECT COUNT(*) FROM t"), 1);
    assert_int_equal(one(rep, "SELECT lsn FROM repl_state"), 1);

    /* Promotion's transaction. */
    assert_int_equal(standby_apply_promote(rep, "admin:test", &term, err, sizeof err), 0);
    assert_int_equal(term, 2);
    assert_int_equal(one(rep, "SELECT term FROM repl_state"), 2);
    assert_int_equal(one(rep, "SELECT start_lsn FROM repl_terms WHERE term = 2"), 1);
    sqlite3_free(cs);
    sqlite3_close(rep);
    sqlite3_close(prim);
}

static void test_vote_count(void **st)
{
    (void)st;
    const failover_live live[] = {{1, "a1", "a1"}, {2, "a2", NULL}, {3, "a3", "agent"}};
    int64_t now = 100000;
    failover_ballot v[] = {
        {"a1", 1, 6000, 1, now - 1000, NULL},      /* counts */
        {"agent", 2, 4000, 1, now - 1000, NULL},   /* lost for less than S/2 */
        {"agent", 3, 6000, 2, now - 1000, NULL},   /* another term */
        {"zz", -1, 9000, 1, now - 1000, NULL},     /* not a live agent */
    };
    assert_int_equal(failover_count(live, 3, v, 4, now, 10, 1), 1);
    v[1].lost_ms = 5000;
    assert_int_equal(failover_count(live, 3, v, 4, now, 10, 1), 2);
    v[0].at_ms = now - 10001;   /* too old */
    assert_int_equal(failover_count(live, 3, v, 4, now, 10, 1), 1);
    v[2].term = 1;
    assert_int_equal(failover_count(live, 3, v, 4, now, 10, 1), 2);
}

/* Whose vote speaks for whom: the primary's token binding (schema 0011). */
static void test_vote_binding(void **st)
{
    (void)st;
    const failover_live live[] = {{1, "a1", "a1"}, {2, "a2", "agent"}, {3, "a3", NULL}};
    int64_t now = 100000;
    failover_ballot b = {"agent", 1, 9000, 1, now, NULL};
    assert_int_equal(failover_count(live, 3, &b, 1, now, 10, 1), 0);   /* shared token for a named agent */
    b.agent_id = 2;
    assert_int_equal(failover_count(live, 3, &b, 1, now, 10, 1), 1);
    b.agent_id = 3;                                                     /* registered without a holder */
    assert_int_equal(failover_count(live, 3, &b, 1, now, 10, 1), 1);
    b.agent_id = -1;                                                    /* no id: two agents on the shared token */
    assert_int_equal(failover_count(live, 3, &b, 1, now, 10, 1), 0);
    assert_int_equal(failover_count(live, 2, &b, 1, now, 10, 1), 1);   /* only a2: it is the one */
    b.name = "a3";                                                      /* a registration naming a3 */
    assert_int_equal(failover_count(live, 3, &b, 1, now, 10, 1), 1);
    b.name = "a1";                                                      /* ... naming a named token's agent */
    assert_int_equal(failover_count(live, 3, &b, 1, now, 10, 1), 0);
    b.name = NULL;
    b = (failover_ballot){"a1", 2, 9000, 1, now, NULL};                       /* a named token for another agent's id */
    assert_int_equal(failover_count(live, 3, &b, 1, now, 10, 1), 0);
    b.agent_id = -1;                                                    /* a named token without an id */
    assert_int_equal(failover_count(live, 3, &b, 1, now, 10, 1), 1);
    b.agent_id = 1;
    assert_int_equal(failover_count(live, 3, &b, 1, now, 10, 1), 1);
    b.agent_id = 9;                                                     /* no live agent of that id */
    assert_int_equal(failover_count(live, 3, &b, 1, now, 10, 1), 0);
}

static void test_vote_decide(void **st)
{
    (void)st;
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(":memory:", &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db,
        "CREATE TABLE agents(id INTEGER PRIMARY KEY, name TEXT, state TEXT, last_heartbeat INTEGER, holder TEXT);"
        "INSERT INTO agents VALUES (1, 'w1', 'ALIVE', 1000000, 'w1'), (2, 'w2', 'ALIVE', 990000, NULL),"
        " (3, 'w3', 'ALIVE', 1000000 - 61000, 'w3'), (4, 'w4', 'LOST', 1000000, 'w4');", NULL, NULL, NULL), SQLITE_OK);
    int agree, live;
    /* Live: w1, w2 (w3 too old, w4 LOST). No vote yet. */
    assert_int_equal(failover_decide(db, 20000, 10, 1, &agree, &live), 0);
    assert_int_equal(live, 2);
    failover_vote("w1", 1, NULL, 8000, 1);
    failover_vote("w3", 3, NULL, 8000, 1);   /* not live: does not count */
    failover_vote("w4", -1, NULL, 8000, 1);
    assert_int_equal(failover_decide(db, 20000, 10, 1, &agree, &live), 0);   /* 1 of 2: no majority */
    assert_int_equal(agree, 1);
    failover_vote("agent", 2, NULL, 8000, 1);   /* w2 registered without a holder: the shared token speaks for it */
    assert_int_equal(failover_decide(db, 20000, 10, 1, &agree, &live), 1);
    assert_int_equal(agree, 2);
    assert_int_equal(failover_decide(db, 9000, 10, 1, &agree, &live), 0);   /* not silent long enough */
    assert_int_equal(agree, 2);                                              /* ... but counted (the log) */
    assert_int_equal(failover_decide(db, 20000, 0, 1, &agree, &live), 0);   /* manual only */
    assert_int_equal(failover_decide(db, 20000, 10, 2, &agree, &live), 0);  /* votes of another term */
    assert_true(failover_votes_recent(10) >= 4);
    /* Two agents on the shared token: each heartbeat's path names its
     * agent, so they are two voters (the old rule counted one). */
    sqlite3_exec(db, "DELETE FROM agents; INSERT INTO agents VALUES (11, 's1', 'ALIVE', 5, 'agent'),"
                     " (12, 's2', 'ALIVE', 5, 'agent'), (13, 's3', 'ALIVE', 5, 'agent')", NULL, NULL, NULL);
    failover_vote("agent", 11, NULL, 8000, 1);
    assert_int_equal(failover_decide(db, 20000, 10, 1, &agree, &live), 0);
    assert_int_equal(agree, 1);
    failover_vote("agent", 12, NULL, 8000, 1);
    assert_int_equal(failover_decide(db, 20000, 10, 1, &agree, &live), 1);
    assert_int_equal(agree, 2);
    assert_int_equal(live, 3);
    /* A shared-token vote without an id: one live agent on it only. */
    sqlite3_exec(db, "DELETE FROM agents; INSERT INTO agents VALUES (21, 'u1', 'ALIVE', 5, 'agent')", NULL, NULL, NULL);
    failover_vote("agent", -1, NULL, 8000, 1);
    assert_int_equal(failover_decide(db, 20000, 10, 1, &agree, &live), 1);
    sqlite3_exec(db, "INSERT INTO agents VALUES (22, 'u2', 'ALIVE', 5, 'agent')", NULL, NULL, NULL);
    assert_int_equal(failover_decide(db, 20000, 10, 1, &agree, &live), 0);
    assert_int_equal(agree, 0);
    failover_vote("agent", -1, "u1", 8000, 1);   /* registrations say which agent they are */
    failover_vote("agent", -1, "u2", 8000, 1);
    assert_int_equal(failover_decide(db, 20000, 10, 1, &agree, &live), 1);
    assert_int_equal(agree, 2);
    sqlite3_exec(db, "DELETE FROM agents", NULL, NULL, NULL);
    assert_int_equal(failover_decide(db, 20000, 10, 1, &agree, &live), 0);  /* no witness */
    sqlite3_close(db);
}

/* The spool (standby_spool.c): appended answers come back whole and in
 * order, survive a reopen, a torn or corrupt last record is dropped at
 * open, records already applied are skipped, a spool of another term or
 * one that does not follow the replica is dropped, and an applied spool
 * over its bound is emptied. */
static size_t spool_size(const char *db)
{
    char p[400];
    struct stat sb;
    standby_spool_path(db, p, sizeof p);
    return stat(p, &sb) ? (size_t)-1 : (size_t)sb.st_size;
}

static void spool_cut(const char *db, size_t size)
{
    char p[400];
    standby_spool_path(db, p, sizeof p);
    assert_int_equal(truncate(p, (off_t)size), 0);
}

static void spool_poke(const char *db, size_t at)
{
    char p[400];
    standby_spool_path(db, p, sizeof p);
    FILE *f = fopen(p, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, (long)at, SEEK_SET), 0);
    int c = fgetc(f);
    assert_int_equal(fseek(f, (long)at, SEEK_SET), 0);
    fputc(c ^ 0x5a, f);
    fclose(f);
}

static void test_spool(void **st)
{
    (void)st;
    char db[300], err[256];
    snprintf(db, sizeof db, "%s/replica.db", dir);
    static uint8_t a[256], b[256], c[256];
    size_t na = 0, nb = 0, nc = 0;
    put_frame(a, &na, 1, 1, 0, 5, "T\x01\x01p", 5);
    put_frame(a, &na, 2, 1, 0, 5, "T\x01\x01q", 5);
    put_frame(b, &nb, 3, 1, 0, 5, "T\x01\x01r", 5);
    put_frame(c, &nc, 4, 1, 0, 5, "T\x01\x01s", 5);
    standby_spool *sp = NULL;
    uint8_t *buf = NULL;
    size_t n = 0;
    int64_t mark = 0;

    /* empty: nothing pending, the last LSN is the replica's */
    assert_int_equal(standby_spool_open(db, 0, 1, &sp, err, sizeof err), 0);
    assert_int_equal(standby_spool_last(sp), 0);
    assert_false(standby_spool_pending(sp));
    assert_int_equal(standby_spool_take(sp, 0, 1 << 20, &buf, &n, &mark), 0);
    assert_int_equal(n, 0);
    assert_int_equal(standby_spool_append(sp, a, na, 2), 0);
    assert_int_equal(standby_spool_append(sp, b, nb, 3), 0);
    assert_int_equal(standby_spool_last(sp), 3);
    assert_true(standby_spool_pending(sp));
    /* both records in one take, in order; max below the second: the first alone */
    assert_int_equal(standby_spool_take(sp, 0, 1 << 20, &buf, &n, &mark), 0);
    assert_int_equal(n, na + nb);
    assert_memory_equal(buf, a, na);
    assert_memory_equal(buf + na, b, nb);
    free(buf);
    assert_int_equal(standby_spool_take(sp, 0, na, &buf, &n, &mark), 0);
    assert_int_equal(n, na);
    free(buf);
    standby_spool_close(sp);

    /* reopened: the same two records, nothing applied yet */
    assert_int_equal(standby_spool_open(db, 0, 1, &sp, err, sizeof err), 0);
    assert_int_equal(standby_spool_last(sp), 3);
    assert_int_equal(standby_spool_take(sp, 0, 1 << 20, &buf, &n, &mark), 0);
    assert_int_equal(n, na + nb);
    free(buf);
    /* a third record torn by a crash: dropped at open, then appended again */
    assert_int_equal(standby_spool_append(sp, c, nc, 4), 0);
    size_t full = spool_size(db);
    standby_spool_close(sp);
    spool_cut(db, full - 3);
    assert_int_equal(standby_spool_open(db, 0, 1, &sp, err, sizeof err), 0);
    assert_int_equal(standby_spool_last(sp), 3);
    assert_int_equal(spool_size(db), full - 16 - nc);
    assert_int_equal(standby_spool_append(sp, c, nc, 4), 0);
    assert_int_equal(spool_size(db), full);
    standby_spool_close(sp);
    /* one flipped byte in the last record's body: its hash fails, it goes */
    spool_poke(db, full - 2);
    assert_int_equal(standby_spool_open(db, 0, 1, &sp, err, sizeof err), 0);
    assert_int_equal(standby_spool_last(sp), 3);
    assert_int_equal(spool_size(db), full - 16 - nc);
    assert_int_equal(standby_spool_append(sp, c, nc, 4), 0);
    standby_spool_close(sp);

    /* the replica applied through lsn 2: the first record is skipped */
    assert_int_equal(standby_spool_open(db, 2, 1, &sp, err, sizeof err), 0);
    assert_int_equal(standby_spool_last(sp), 4);
    assert_int_equal(standby_spool_take(sp, 0, 1 << 20, &buf, &n, &mark), 0);
    assert_int_equal(n, nb + nc);
    assert_memory_equal(buf, b, nb);
    free(buf);
    standby_spool_applied(sp, mark);
    assert_false(standby_spool_pending(sp));
    standby_spool_close(sp);
    /* applied through 4: nothing pending; through 6 (past the spool): the same */
    assert_int_equal(standby_spool_open(db, 4, 1, &sp, err, sizeof err), 0);
    assert_false(standby_spool_pending(sp));
    standby_spool_close(sp);
    assert_int_equal(standby_spool_open(db, 6, 1, &sp, err, sizeof err), 0);
    assert_int_equal(standby_spool_last(sp), 6);
    assert_false(standby_spool_pending(sp));
    standby_spool_close(sp);
    /* another term: the records past the replica are not its past */
    assert_int_equal(standby_spool_open(db, 1, 2, &sp, err, sizeof err), 0);
    assert_int_equal(standby_spool_last(sp), 1);
    assert_false(standby_spool_pending(sp));
    standby_spool_close(sp);
    assert_int_equal(standby_spool_remove(db), 0);
    assert_int_equal(spool_size(db), (size_t)-1);
    assert_int_equal(standby_spool_remove(db), 0);   /* none: fine */

    /* an applied spool over its bound (16 MiB) is emptied */
    size_t big = (17u << 20) + 24;
    uint8_t *g = calloc(1, big);
    assert_non_null(g);
    size_t ng = 0;
    put_frame(g, &ng, 1, 1, 0, (uint32_t)(big - 24), NULL, 0);
    ng += big - 24;   /* a body of zeros (calloc) */
    assert_int_equal(standby_spool_open(db, 0, 1, &sp, err, sizeof err), 0);
    assert_int_equal(standby_spool_append(sp, g, ng, 1), 0);
    assert_int_equal(standby_spool_take(sp, 0, 1 << 20, &buf, &n, &mark), 0);
    assert_int_equal(n, ng);   /* one record over max still comes whole */
    free(buf);
    standby_spool_applied(sp, mark);
    assert_int_equal(spool_size(db), 0);
    assert_int_equal(standby_spool_append(sp, b, nb, 3), 0);   /* lsn 2 was never spooled: the caller checks */
    standby_spool_close(sp);
    free(g);
}

/* One primary transaction (sql) under a session: its changeset. */
static void *session_txn(sqlite3 *prim, const char *sql, int *len)
{
    sqlite3_session *ses;
    void *cs = NULL;
    assert_int_equal(sqlite3session_create(prim, "main", &ses), SQLITE_OK);
    assert_int_equal(sqlite3session_attach(ses, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_exec(prim, "BEGIN", NULL, NULL, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_exec(prim, sql, NULL, NULL, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_exec(prim, "UPDATE repl_state SET lsn = lsn + 1 WHERE id = 1", NULL, NULL, NULL),
                     SQLITE_OK);
    assert_int_equal(sqlite3session_changeset(ses, len, &cs), SQLITE_OK);
    assert_int_equal(sqlite3_exec(prim, "COMMIT", NULL, NULL, NULL), SQLITE_OK);
    sqlite3session_delete(ses);
    return cs;
}

/* At start the replica takes what its spool holds past it
 * (standby_spool_catch_up): two records applied, the replica at their
 * LSN, nothing pending; again: nothing to do; a spooled frame that
 * conflicts is divergence. */
static void test_spool_catch_up(void **st)
{
    (void)st;
    char path[512], err[256];
    sqlite3 *prim = open_db("p.db"), *rep = open_db("r.db");
    sqlite3_close(rep);
    snprintf(path, sizeof path, "%s/r.db", dir);
    assert_int_equal(standby_spool_catch_up(path, err, sizeof err), 0);   /* no spool: nothing */
    int l1 = 0, l2 = 0;
    void *c1 = session_txn(prim, "INSERT INTO t(v) VALUES ('one')", &l1);
    void *c2 = session_txn(prim, "INSERT INTO t(v) VALUES ('two'); INSERT INTO t(v) VALUES ('three')", &l2);
    static uint8_t f1[4096], f2[4096], f3[4096];
    size_t n1 = 0, n2 = 0, n3 = 0;
    put_frame(f1, &n1, 1, 1, 0, (uint32_t)l1, c1, (size_t)l1);
    put_frame(f2, &n2, 2, 1, 0, (uint32_t)l2, c2, (size_t)l2);
    put_frame(f3, &n3, 3, 1, 0, (uint32_t)l1, c1, (size_t)l1);   /* 'one' again: a conflict */
    standby_spool *sp = NULL;
    assert_int_equal(standby_spool_open(path, 0, 1, &sp, err, sizeof err), 0);
    assert_int_equal(standby_spool_append(sp, f1, n1, 1), 0);
    assert_int_equal(standby_spool_append(sp, f2, n2, 2), 0);
    standby_spool_close(sp);
    assert_int_equal(standby_spool_catch_up(path, err, sizeof err), 0);
    rep = NULL;
    assert_int_equal(sqlite3_open(path, &rep), SQLITE_OK);
    assert_int_equal(one(rep, "SELECT lsn FROM repl_state"), 2);
    assert_int_equal(one(rep, "SELECT COUNT(*) FROM t"), 3);
    assert_int_equal(one(rep, "SELECT COUNT(*) FROM tlog"), 3);   /* the primary trigger's rows, not doubled */
    sqlite3_close(rep);
    assert_int_equal(standby_spool_open(path, 2, 1, &sp, err, sizeof err), 0);
    assert_false(standby_spool_pending(sp));
    assert_int_equal(standby_spool_append(sp, f3, n3, 3), 0);
    standby_spool_close(sp);
    assert_int_equal(standby_spool_catch_up(path, err, sizeof err), HF_ECORRUPT);
    assert_non_null(strstr(err, "diverged"));
    rep = NULL;
    assert_int_equal(sqlite3_open(path, &rep), SQLITE_OK);
    assert_int_equal(one(rep, "SELECT lsn FROM repl_state"), 2);   /* rolled back */
    sqlite3_close(rep);
    sqlite3_free(c1);
    sqlite3_free(c2);
    sqlite3_close(prim);
}

static void test_argv_edit(void **st)
{
    (void)st;
    char *argv[] = {"sched", "--db", "x.db", "--standby-of", "http://a", "--standby-of=http://b", "--listen", "y", NULL};
    char **v = standby_argv_edit(argv, 8, "--standby-of", "--peers", "http://a");
    assert_non_null(v);
    const char *want[] = {"sched", "--db", "x.db", "--listen", "y", "--peers", "http://a", NULL};
    for (int i = 0; want[i]; i++) assert_string_equal(v[i], want[i]);
    assert_null(v[7]);
    free(v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_frames),
        cmocka_unit_test_setup_teardown(test_apply, setup, teardown),
        cmocka_unit_test(test_vote_count),
        cmocka_unit_test(test_vote_binding),
        cmocka_unit_test(test_vote_decide),
        cmocka_unit_test(test_argv_edit),
        cmocka_unit_test_setup_teardown(test_spool, setup, teardown),
        cmocka_unit_test_setup_teardown(test_spool_catch_up, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
