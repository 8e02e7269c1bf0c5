/*
 * test_scheduler_purge.c — deleting an experiment (sched_experiment_delete,
 * scheduler/core/sched_purge.c, scheduler/store/purge.c): the real core on
 * a real SQLite file.
 *
 *   - an experiment of 300 trials with 60,000 metric points, 1,000 log
 *     lines, events, allocations, checkpoint rows, a webhook with outbox
 *     rows and a code context row, beside another experiment: right after
 *     the delete it is gone from every core call (get, list, trials, trial
 *     get) and from the webhooks list while its rows are all still there;
 *     the tick removes them in batches of at most SCHED_PURGE_ROWS rows
 *     (counted by an SQLite update hook), `PRAGMA foreign_key_check` is
 *     clean after every batch; the core closed and reopened in the middle
 *     does not load it and finishes the purge; then no row of it is left,
 *     the other experiment's rows are all there, the release hook got
 *     exactly its checkpoint hashes once no row named them, the gauge of
 *     experiments being purged went back to 0, the counter of purged rows
 *     counts every row, and its ids are not handed out again.
 *   - schema 0017 on a database an older scheduler purged: a global
 *     hook's outbox rows whose events are gone are removed, the rest kept.
 *   - the replication log: with capture on, the purge of 16 MiB of log
 *     lines is many frames, none over SCHED_PURGE_BYTES and a margin (with
 *     the whole delete in one transaction, as before the purge, the test
 *     fails on a 16 MiB frame), and the frames applied to a copy taken at
 *     the start, as a standby applies them, leave it with the primary's
 *     rows.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#define SQLITE_ENABLE_SESSION 1   /* the changeset API, to apply frames as a standby does */
#define SQLITE_ENABLE_PREUPDATE_HOOK 1
#include <sqlite3.h>

#include "hf_err.h"
#include "scheduler/api/metrics.h"
#include "scheduler/core/sched.h"
#include "scheduler/notify/webhook.h"
#include "scheduler/store/repl.h"
#include "scheduler/store/store.h"
#include "tests/unit/unit_fixture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char dir[256];

static int setup(void **st) { (void)st; return unit_tmpdir(dir, sizeof dir, "purge"); }
static int teardown(void **st) { (void)st; repl_stop(); return unit_rmtree(dir); }

#define EXP(name) "{\"name\": \"" name "\", \"objective\": {\"metric\": \"m\", \"goal\": \"maximize\"}," \
                  "\"searcher\": {\"name\": \"random\", \"max_trials\": 100, \"seed\": 1}," \
                  "\"hyperparameters\": {\"x\": {\"type\": \"uniform\", \"min\": 0, \"max\": 1}}," \
                  "\"trial\": {\"command\": [\"true\"]}}"

static void sql(sqlite3 *db, const char *fmt, ...)
{
    char q[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(q, sizeof q, fmt, ap);
    va_end(ap);
    char *msg = NULL;
    if (sqlite3_exec(db, q, NULL, NULL, &msg) != SQLITE_OK) fail_msg("%s: %s", q, msg);
}

static int64_t one(sqlite3 *db, const char *fmt, ...)
{
    char q[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(q, sizeof q, fmt, ap);
    va_end(ap);
    return unit_one_int(db, q);
}

static int64_t rows_own(sqlite3 *db, int64_t x, int64_t first, int64_t last);

/* The events ids fill() gave experiment x's events (they outlive the rows). */
static struct { int64_t x, lo, hi; } ev_ids[4];
static int nev_ids;
static int64_t ev_lo(int64_t x, int hi)
{
    for (int i = 0; i < nev_ids; i++)
        if (ev_ids[i].x == x) return hi ? ev_ids[i].hi : ev_ids[i].lo;
    fail_msg("no events recorded for experiment %lld", (long long)x);
    return 0;
}

/* Every row that belongs to experiment x, in every table the purge
 * empties (its trials found through the trials table while it has them,
 * else through the ids first..last it had), the global hook's outbox
 * rows for its events included. */
static int64_t rows_of(sqlite3 *db, int64_t x, int64_t first, int64_t last)
{
    return one(db, "SELECT %lld + (SELECT count(*) FROM webhook_outbox o JOIN webhooks h ON h.id=o.hook_id "
                   "WHERE h.experiment_id IS NULL AND o.event_id BETWEEN %lld AND %lld)",
               (long long)rows_own(db, x, first, last), (long long)ev_lo(x, 0), (long long)ev_lo(x, 1));
}

static int64_t rows_own(sqlite3 *db, int64_t x, int64_t first, int64_t last)
{
    return one(db,
               "SELECT (SELECT count(*) FROM experiments WHERE id=%1$lld) + "
               "(SELECT count(*) FROM purge_queue WHERE experiment_id=%1$lld) + "
               "(SELECT count(*) FROM trials WHERE experiment_id=%1$lld) + "
               "(SELECT count(*) FROM metrics WHERE trial_id BETWEEN %2$lld AND %3$lld) + "
               "(SELECT count(*) FROM logs WHERE trial_id BETWEEN %2$lld AND %3$lld) + "
               "(SELECT count(*) FROM allocations WHERE trial_id BETWEEN %2$lld AND %3$lld) + "
               "(SELECT count(*) FROM checkpoints WHERE trial_id BETWEEN %2$lld AND %3$lld) + "
               "(SELECT count(*) FROM events WHERE experiment_id=%1$lld OR trial_id BETWEEN %2$lld AND %3$lld) + "
               "(SELECT count(*) FROM webhooks WHERE experiment_id=%1$lld) + "
               "(SELECT count(*) FROM webhook_outbox o JOIN webhooks h ON h.id=o.hook_id "
               " WHERE h.experiment_id=%1$lld) + "
               "(SELECT count(*) FROM contexts WHERE experiment_id=%1$lld)",
               (long long)x, (long long)first, (long long)last);
}

static void fk_clean(sqlite3 *db)
{
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_prepare_v2(db, "PRAGMA foreign_key_check", -1, &st, NULL), SQLITE_OK);
    int src = sqlite3_step(st);
    if (src == SQLITE_ROW)
        fail_msg("foreign key violation: table %s row %lld refers to %s", sqlite3_column_text(st, 0),
                 (long long)sqlite3_column_int64(st, 1), sqlite3_column_text(st, 2));
    assert_int_equal(src, SQLITE_DONE);
    sqlite3_finalize(st);
}

/* Rows deleted, counted by the update hook of the writer connection
 * (shadow tables of the log index left out: they follow the logs). */
static int64_t deleted;
static void on_update(void *arg, int op, const char *db, const char *table, sqlite3_int64 rowid)
{
    (void)arg;
    (void)db;
    (void)rowid;
    if (op == SQLITE_DELETE && strncmp(table, "logs_fts", 8) != 0) deleted++;
}

/* The release hook: the hashes it was handed, and whether a row still
 * named one of them then. */
static char released[512][65];
static int nreleased, released_named;
static store *hook_store;
static void on_release(void *ctx, const char (*hashes)[SCHED_HASH_LEN + 1], size_t n)
{
    (void)ctx;
    for (size_t i = 0; i < n; i++) {
        assert_true(nreleased < 512);
        memcpy(released[nreleased++], hashes[i], 65);
        sqlite3 *r = store_reader_get(hook_store);
        released_named += (int)one(r, "SELECT count(*) FROM checkpoints WHERE sha256='%s'", hashes[i]);
        store_reader_put(hook_store, r);
    }
}

static int released_has(const char *sha)
{
    for (int i = 0; i < nreleased; i++)
        if (strcmp(released[i], sha) == 0) return 1;
    return 0;
}

static void hash_of(int64_t i, char out[65])
{
    snprintf(out, 65, "%064llx", (unsigned long long)(0xab0000 + i));
}

/* The rows of experiment x: ntrials trials from tid0, npoints metric
 * points interleaved across them, nlogs log lines of line_len bytes, two
 * events, an allocation and a checkpoint per trial (hash_of(trial id)),
 * a webhook with 3 outbox rows, a context row, and for each of its
 * RUNNING events an undelivered outbox row of the global hook (made at
 * the first call, queued as store_event_insert does; none is due). */
static void fill(sqlite3 *db, int64_t x, int64_t tid0, int ntrials, int npoints, int nlogs, int line_len)
{
    sqlite3_stmt *st = NULL;
    char sha[65];
    sql(db, "BEGIN");
    sql(db, "UPDATE experiments SET state='COMPLETED', ended_at=1 WHERE id=%lld", (long long)x);
    if (one(db, "SELECT count(*) FROM webhooks WHERE experiment_id IS NULL") == 0)
        sql(db, "INSERT INTO webhooks(url,secret,format,events,experiment_id,created_at) "
                "VALUES('https://192.0.2.2/global','s','json','[\"trial.*\"]',NULL,1)");
    sql(db, "INSERT OR IGNORE INTO agents(id,name,host,slots,state,registered_at,last_heartbeat) "
            "VALUES(1,'gone','h',1,'LOST',1,1)");
    for (int t = 0; t < ntrials; t++) {
        int64_t tid = tid0 + t;
        hash_of(tid, sha);
        sql(db, "INSERT INTO trials(id,experiment_id,idx,state,hparams,budget,created_at,ended_at,objective) "
                "VALUES(%lld,%lld,%d,'COMPLETED','{\"x\":0.5}',1,1,2,0.5)", (long long)tid, (long long)x, t);
        sql(db, "INSERT INTO allocations(trial_id,attempt,rank,agent_id,slots,created_at,released_at) "
                "VALUES(%lld,1,0,1,1,1,2)", (long long)tid);
        sql(db, "INSERT INTO checkpoints(trial_id,attempt,path,step,time,sha256,size,state) "
                "VALUES(%lld,1,'p',1,1,'%s',10,'stored')", (long long)tid, sha);
        sql(db, "INSERT INTO events(time,experiment_id,trial_id,type,detail) VALUES(1,%lld,%lld,'RUNNING','x')",
            (long long)x, (long long)tid);
        /* as store_event_insert queues it for the global hook */
        sql(db, "INSERT INTO webhook_outbox(hook_id,event_id,next_at) SELECT id,last_insert_rowid(),1 "
                "FROM webhooks WHERE experiment_id IS NULL");
        sql(db, "INSERT INTO events(time,experiment_id,trial_id,type,detail) VALUES(1,NULL,%lld,'STRAY','x')",
            (long long)tid);
    }
    assert_int_equal(sqlite3_prepare_v2(db, "INSERT INTO metrics(trial_id,attempt,name,step,value,time) "
                                            "VALUES(?,1,?,?,?,1)", -1, &st, NULL), SQLITE_OK);
    for (int i = 0; i < npoints; i++) {
        sqlite3_bind_int64(st, 1, tid0 + i % ntrials);
        sqlite3_bind_text(st, 2, i % 3 ? "loss" : "m", -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 3, i / ntrials);
        sqlite3_bind_double(st, 4, (double)i);
        assert_int_equal(sqlite3_step(st), SQLITE_DONE);
        sqlite3_reset(st);
    }
    sqlite3_finalize(st);
    char *line = malloc((size_t)line_len + 1);
    assert_non_null(line);
    memset(line, 'a', (size_t)line_len);   /* one trigram: the log index stays small */
    line[line_len] = 0;
    assert_int_equal(sqlite3_prepare_v2(db, "INSERT INTO logs(trial_id,attempt,stream,line,time) VALUES(?,1,'stdout',?,1)",
                                        -1, &st, NULL), SQLITE_OK);
    for (int i = 0; i < nlogs; i++) {
        sqlite3_bind_int64(st, 1, tid0 + i % ntrials);
        sqlite3_bind_text(st, 2, line, line_len, SQLITE_STATIC);
        assert_int_equal(sqlite3_step(st), SQLITE_DONE);
        sqlite3_reset(st);
    }
    sqlite3_finalize(st);
    free(line);
    sql(db, "INSERT INTO webhooks(url,secret,format,events,experiment_id,created_at) "
            "VALUES('https://192.0.2.1/h','s','json','[\"*\"]',%lld,1)", (long long)x);
    for (int i = 0; i < 3; i++)
        sql(db, "INSERT INTO webhook_outbox(hook_id,event_id,next_at,delivered_at) "
                "VALUES((SELECT max(id) FROM webhooks),1,1,1)");   /* delivered: no delivery is due */
    sql(db, "INSERT INTO contexts(sha256,size,experiment_id,time) VALUES('%064d',1,%lld,1)", 0, (long long)x);
    /* the global hook's rows: none is due in this test */
    sql(db, "UPDATE webhook_outbox SET next_at=9000000000000 WHERE delivered_at IS NULL");
    assert_int_equal(one(db, "SELECT count(*) FROM webhook_outbox o JOIN events e ON e.id=o.event_id "
                             "JOIN webhooks h ON h.id=o.hook_id WHERE h.experiment_id IS NULL "
                             "AND e.experiment_id=%lld", (long long)x), ntrials);
    ev_ids[nev_ids].x = x;
    ev_ids[nev_ids].lo = one(db, "SELECT min(id) FROM events WHERE experiment_id=%lld AND type='RUNNING'",
                             (long long)x);
    ev_ids[nev_ids++].hi = one(db, "SELECT max(id) FROM events WHERE experiment_id=%lld AND type='RUNNING'",
                             (long long)x);
    sql(db, "COMMIT");
}

/* Tick until nothing waits for the purge, at most max ticks, checking
 * each batch's rows and the foreign keys. RET the ticks it took. */
static int purge_ticks(sched *c, store *s, int max)
{
    sched_stats ss;
    int n = 0;
    for (;; n++) {
        sched_get_stats(c, &ss);
        if (ss.experiments_purging == 0 || n == max) break;
        deleted = 0;
        sched_tick(c);
        if (deleted > SCHED_PURGE_ROWS) fail_msg("tick %d deleted %lld rows in one transaction", n, (long long)deleted);
        fk_clean(store_db(s));
    }
    return n;
}

/* The deleted experiment's trials: more than one step of the purge's
 * window (RANGE_TRIALS in purge.c); it is the newest, after the kept one's
 * three. */
#define NA   300
#define A_T0 4
#define A_T1 (A_T0 + NA - 1)

static void test_purge(void **state)
{
    (void)state;
    char path[512], sha[65], err[256];
    store *s = NULL;
    sched *c = NULL;
    snprintf(path, sizeof path, "%s/purge.db", dir);
    unit_open_core(path, NULL, &s, &c);
    int64_t xb = unit_submit(c, EXP("kept")), xa = unit_submit(c, EXP("big"));
    sched_free(c);
    sqlite3 *db = store_db(s);
    fill(db, xb, 1, 3, 300, 30, 20);
    fill(db, xa, A_T0, NA, 60000, 1000, 200);
    int64_t b_rows = rows_of(db, xb, 1, 3), a_rows = rows_of(db, xa, A_T0, A_T1);
    assert_true(a_rows > 61000);
    sched_config cfg;
    sched_config_defaults(&cfg);
    if (sched_new(&cfg, s, NULL, &c, err, sizeof err)) fail_msg("sched_new: %s", err);
    hook_store = s;
    sched_set_release(c, on_release, NULL);
    assert_int_equal(sched_trial_exists(c, A_T0), 1);

    /* The delete: gone at once from the core, every row still there. */
    uint64_t purged0 = atomic_load(&metrics.purged_rows);
    hf_jerr je;
    assert_int_equal(sched_experiment_delete_as(c, xa, "alice", &je), 0);
    json_t *out = NULL;
    assert_int_equal(sched_experiment_get(c, xa, &out), HF_ENOTFOUND);
    assert_int_equal(sched_experiment_trials(c, xa, &out), HF_ENOTFOUND);
    assert_int_equal(sched_trial_get(c, A_T0, &out), HF_ENOTFOUND);
    assert_int_equal(sched_trial_exists(c, A_T1), 0);
    assert_int_equal(sched_experiment_delete(c, xa, &je), HF_ENOTFOUND);
    assert_int_equal(sched_experiment_list(c, 1, &out), 0);
    assert_int_equal(json_array_size(json_object_get(out, "experiments")), 1);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(json_object_get(out, "experiments"), 0), "id")),
                     xb);
    json_decref(out);
    webhook_svc *w = NULL;
    assert_int_equal(webhook_open(path, &w, err, sizeof err), 0);
    assert_int_equal(webhook_list(w, &out), 0);
    json_t *hooks = json_object_get(out, "webhooks");
    assert_int_equal(json_array_size(hooks), 2);   /* the global hook and B's */
    assert_true(json_is_null(json_object_get(json_array_get(hooks, 0), "experiment_id")));
    assert_int_equal(json_integer_value(json_object_get(json_array_get(hooks, 1), "experiment_id")), xb);
    json_decref(out);
    webhook_close(w);
    assert_int_equal(rows_of(db, xa, A_T0, A_T1), a_rows + 1);   /* + its purge_queue row */
    assert_int_equal(one(db, "SELECT count(*) FROM events WHERE type='DELETED' AND experiment_id IS NULL "
                             "AND user_name='alice' AND detail LIKE 'experiment %lld (big) deleted'", (long long)xa), 1);
    sched_stats ss;
    sched_get_stats(c, &ss);
    assert_int_equal(ss.experiments_purging, 1);
    assert_int_equal(ss.trials_by_state[3], 3);   /* COMPLETED: B's only */

    /* A few batches, bounded; then a restart in the middle. */
    sqlite3_update_hook(db, on_update, NULL);
    assert_int_equal(purge_ticks(c, s, 3), 3);
    int64_t left = rows_of(db, xa, A_T0, A_T1);
    assert_true(left > 0 && left < a_rows + 1);
    assert_true(one(db, "SELECT count(*) FROM metrics WHERE trial_id BETWEEN %d AND %d", A_T0, A_T1) > 0);
    sched_free(c);
    store_close(s);
    unit_open_core(path, NULL, &s, &c);
    db = store_db(s);
    hook_store = s;
    sched_set_release(c, on_release, NULL);
    assert_int_equal(sched_experiment_get(c, xa, &out), HF_ENOTFOUND);
    assert_int_equal(sched_trial_exists(c, A_T0), 0);
    assert_int_equal(sched_trial_exists(c, 1), 1);
    sched_get_stats(c, &ss);
    assert_int_equal(ss.experiments_purging, 1);
    assert_int_equal(rows_of(db, xa, A_T0, A_T1), left);
    sqlite3_update_hook(db, on_update, NULL);
    purge_ticks(c, s, 100000);
    sched_get_stats(c, &ss);
    assert_int_equal(ss.experiments_purging, 0);
    sched_tick(c);   /* nothing left to do: no batch, no error */

    /* Nothing of A is left; B is whole; the objects were handed over once
     * no row named them. */
    assert_int_equal(rows_of(db, xa, A_T0, A_T1), 0);
    assert_int_equal(rows_of(db, xb, 1, 3), b_rows);
    assert_int_equal(one(db, "SELECT count(*) FROM events WHERE type='DELETED'"), 1);
    /* The global hook waits for B's 3 events only: none of A's is pending
     * (before schema 0017 they stayed, undeliverable, pending forever). */
    assert_int_equal(one(db, "SELECT count(*) FROM webhook_outbox o WHERE NOT EXISTS (SELECT 1 FROM events e "
                             "WHERE e.id=o.event_id) AND o.event_id<>1"), 0);
    assert_int_equal(webhook_open(path, &w, err, sizeof err), 0);
    assert_int_equal(webhook_list(w, &out), 0);
    hooks = json_object_get(out, "webhooks");
    assert_int_equal(json_array_size(hooks), 2);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(hooks, 0), "pending")), 3);
    json_decref(out);
    webhook_close(w);
    fk_clean(db);
    assert_int_equal(nreleased, NA);
    assert_int_equal(released_named, 0);
    for (int64_t t = A_T0; t <= A_T1; t++) {
        hash_of(t, sha);
        assert_true(released_has(sha));
    }
    hash_of(1, sha);
    assert_false(released_has(sha));
    assert_int_equal(atomic_load(&metrics.purged_rows) - purged0, (uint64_t)a_rows + 1);
    /* A was the newest: its ids are never handed out again (id_floor). */
    assert_true(unit_submit(c, EXP("after")) > xa);
    assert_true(one(db, "SELECT id FROM id_floor WHERE name='trials'") >= A_T1);
    sched_free(c);
    store_close(s);
}

/* Schema 0017 on a database an older scheduler purged: the global hook's
 * outbox rows whose events are gone go (they were pending forever), the
 * others stay, and the purge's index exists. */
static void test_orphans_migrated(void **state)
{
    (void)state;
    char path[512];
    store *s = NULL;
    sched *c = NULL;
    snprintf(path, sizeof path, "%s/orphans.db", dir);
    unit_open_core(path, NULL, &s, &c);
    sched_free(c);
    sqlite3 *db = store_db(s);
    sql(db, "INSERT INTO events(id,time,type) VALUES(5,1,'RUNNING')");
    sql(db, "INSERT INTO webhooks(id,url,secret,format,events,created_at) VALUES(9,'https://192.0.2.3/','s','json',"
            "'[\"*\"]',1)");
    sql(db, "INSERT INTO webhook_outbox(hook_id,event_id,next_at) VALUES(9,5,9000000000000),(9,6,9000000000000),"
            "(9,7,9000000000000)");
    /* as a scheduler before 0017 left it (0018's columns too) */
    sql(db, "DROP INDEX webhook_outbox_event");
    sql(db, "ALTER TABLE webhooks DROP COLUMN delivered");
    sql(db, "ALTER TABLE webhooks DROP COLUMN last_status");
    sql(db, "ALTER TABLE webhooks DROP COLUMN last_attempt_at");
    sql(db, "PRAGMA user_version=16");
    store_close(s);
    unit_open_core(path, NULL, &s, &c);
    db = store_db(s);
    assert_int_equal(one(db, "SELECT group_concat(event_id) FROM webhook_outbox"), 5);
    assert_int_equal(one(db, "SELECT count(*) FROM sqlite_schema WHERE name='webhook_outbox_event'"), 1);
    assert_true(one(db, "PRAGMA user_version") >= 17);
    sched_free(c);
    store_close(s);
}

/* ---------- the replication log ---------- */

static int conflict(void *ctx, int kind, sqlite3_changeset_iter *it)
{
    (void)it;
    (*(int *)ctx)++;
    fprintf(stderr, "changeset conflict of kind %d\n", kind);
    return SQLITE_CHANGESET_ABORT;
}

/* The frames after `after`: their count, the largest changeset and the
 * sum; applied to db when it is not NULL (triggers off, as a standby). */
static int frames(int64_t after, sqlite3 *db, size_t *largest, size_t *total)
{
    int nframes = 0;
    *largest = *total = 0;
    for (;;) {
        uint8_t *buf = NULL;
        size_t len = 0, off = 0;
        int n = repl_stream_read(after, 0, REPL_STREAM_MAX, &buf, &len);
        assert_true(n >= 0);
        if (n == 0) break;
        for (int i = 0; i < n; i++) {
            uint64_t lsn = 0;
            uint32_t clen = 0;
            for (int k = 0; k < 8; k++) lsn = lsn << 8 | buf[off + k];
            for (int k = 0; k < 4; k++) clen = clen << 8 | buf[off + 20 + k];
            if (clen > *largest) *largest = clen;
            *total += clen;
            int conflicts = 0;
            if (db)
                assert_int_equal(sqlite3changeset_apply(db, (int)clen, buf + off + REPL_FRAME_HDR, NULL, conflict,
                                                        &conflicts), SQLITE_OK);
            assert_int_equal(conflicts, 0);
            off += REPL_FRAME_HDR + clen;
            after = (int64_t)lsn;
            nframes++;
        }
        free(buf);
    }
    return nframes;
}

static void test_frames(void **state)
{
    (void)state;
    char path[512], copy[512], err[256] = "";
    store *s = NULL;
    sched *c = NULL;
    snprintf(path, sizeof path, "%s/frames.db", dir);
    snprintf(copy, sizeof copy, "%s/standby.db", dir);
    unit_open_core(path, NULL, &s, &c);
    int64_t xa = unit_submit(c, EXP("logs")), xb = unit_submit(c, EXP("kept"));
    sched_free(c);
    fill(store_db(s), xa, 1, 8, 2000, 2000, 8192);   /* 16 MiB of log lines */
    fill(store_db(s), xb, 101, 2, 100, 10, 100);
    sched_config cfg;
    sched_config_defaults(&cfg);
    if (sched_new(&cfg, s, NULL, &c, err, sizeof err)) fail_msg("sched_new: %s", err);
    repl_set_role(REPL_PRIMARY);
    repl_config rc = {.mode = REPL_ASYNC, .standby_timeout_s = 5, .buffer_bytes = 256 << 20};
    if (repl_start(store_db(s), &rc, err, sizeof err)) fail_msg("repl_start: %s", err);
    repl_capture_enable();
    int64_t lsn0 = repl_lsn();
    /* The standby's copy as of lsn0 (as its bootstrap snapshot would be). */
    sqlite3 *sb = NULL;
    assert_int_equal(sqlite3_open(copy, &sb), SQLITE_OK);
    sqlite3_backup *bk = sqlite3_backup_init(sb, "main", store_db(s), "main");
    assert_non_null(bk);
    assert_int_equal(sqlite3_backup_step(bk, -1), SQLITE_DONE);
    sqlite3_backup_finish(bk);
    assert_int_equal(sqlite3_db_config(sb, SQLITE_DBCONFIG_ENABLE_TRIGGER, 0, NULL), SQLITE_OK);

    hf_jerr je;
    assert_int_equal(sched_experiment_delete(c, xa, &je), 0);
    sched_stats ss;
    for (int i = 0; i < 100000; i++) {
        sched_get_stats(c, &ss);
        if (!ss.experiments_purging) break;
        sched_tick(c);
    }
    assert_int_equal(ss.experiments_purging, 0);
    size_t largest, total;
    int n = frames(lsn0, sb, &largest, &total);
    /* A batch's changeset: its rows' bytes (counted against the bound)
     * plus SQLite's per-row and per-value headers. */
    if (largest > SCHED_PURGE_BYTES + (SCHED_PURGE_BYTES >> 2))
        fail_msg("a frame of %zu bytes (bound %d)", largest, SCHED_PURGE_BYTES);
    assert_true(total > (size_t)16000000);
    assert_true(n >= 5);
    /* The standby's copy ends with the primary's rows. */
    const char *q = "SELECT (SELECT count(*) FROM experiments) || '/' || (SELECT count(*) FROM trials) || '/' || "
                    "(SELECT count(*) FROM metrics) || '/' || (SELECT count(*) FROM logs) || '/' || "
                    "(SELECT count(*) FROM events) || '/' || (SELECT count(*) FROM checkpoints) || '/' || "
                    "(SELECT count(*) FROM purge_queue)";
    sqlite3_stmt *a = NULL, *b = NULL;
    assert_int_equal(sqlite3_prepare_v2(store_db(s), q, -1, &a, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(sb, q, -1, &b, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(a), SQLITE_ROW);
    assert_int_equal(sqlite3_step(b), SQLITE_ROW);
    assert_string_equal((const char *)sqlite3_column_text(a, 0), (const char *)sqlite3_column_text(b, 0));
    /* B's rows; events: B's ACTIVE, its 4 and the DELETED event */
    assert_string_equal((const char *)sqlite3_column_text(a, 0), "1/2/100/10/6/2/0");
    sqlite3_finalize(a);
    sqlite3_finalize(b);
    sqlite3_close(sb);
    repl_stop();
    sched_free(c);
    store_close(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_purge),
        cmocka_unit_test(test_orphans_migrated),
        cmocka_unit_test(test_frames),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
