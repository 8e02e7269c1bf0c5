/*
 * test_scheduler_repl.c — the primary's replication log
 * (scheduler/store/repl.h; docs/scheduler.md, "Replication"), on a real
 * SQLite file:
 *
 *   - a snapshot (repl_snapshot) then writes through every writing
 *     connection: the core's writer (agents, an experiment, heartbeats
 *     with metrics and logs: the FTS triggers), the checkpoint store's (a
 *     context and a checkpoint row), retention's (a sweep that fills
 *     checkpoint metrics), the webhook service's (create, test: the events
 *     trigger, its delivery attempt's UPDATE, delete); applying the ring's
 *     frames to the snapshot with triggers off yields the same rows in
 *     every table, FTS shadow tables included, and no write escaped;
 *   - a transaction with no change sends nothing (no LSN);
 *   - a failed COMMIT appends nothing and leaves the LSN;
 *   - a snapshot taken while a commit is visible but not yet in the ring
 *     waits for it: its LSN is never ahead of the stream (no 409 "ahead");
 *   - a stream poll woken by a commit sees repl_lsn() = that commit's LSN;
 *   - the ring drops its oldest frames past --repl-buffer-mb: a standby
 *     that needs them is told "gone" (410), one ahead "ahead" (409);
 *   - ack/wait: a wait ends at the ack; with no ack it degrades after
 *     --standby-timeout (event REPLICATION_DEGRADED); an ack brings it
 *     back to sync; a parked request is woken by the ack; a parked
 *     stream poll by the next commit;
 *   - the snapshot service ("hf-snapshot"): one copy at a time (a second
 *     submit is refused with a retry estimate), a stop ends a running
 *     copy, a whole copy's file has its announced hash, the slot frees
 *     when a copy ends or an unarmed job is released, a client that hung
 *     up ends its copy;
 *   - the list of standbys (by address, each with its ack and state:
 *     catching_up, sync, lost), bounded;
 *   - a request's higher term fences a primary (event FENCED), a lower one
 *     does not;
 *   - the frame header is big-endian lsn, term, 0, len.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#define SQLITE_ENABLE_SESSION 1
#define SQLITE_ENABLE_PREUPDATE_HOOK 1
#include <sqlite3.h>

#include "hf_err.h"
#include "hf_sha256.h"
#include "hf_time.h"
#include "scheduler/notify/webhook.h"
#include "scheduler/store/ckretain.h"
#include "scheduler/store/ckstore.h"
#include "scheduler/store/repl.h"
#include "tests/unit/ckpt_fixture.h"
#include "tests/unit/unit_fixture.h"

#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static char dir[256];
static char events[256];

static int setup(void **st) { (void)st; events[0] = 0; return unit_tmpdir(dir, sizeof dir, "repl"); }
static int teardown(void **st) { (void)st; repl_stop(); return unit_rmtree(dir); }

static void on_event(void *ctx, const char *type, const char *detail)
{
    (void)ctx;
    (void)detail;
    size_t n = strlen(events);
    snprintf(events + n, sizeof events - n, "%s;", type);
}

/* Open the store at dir/name and start the log (mode, timeout, ring). */
static store *open_log(const char *name, int mode, int timeout_s, int64_t ring)
{
    char path[512], err[256] = "";
    store *s = NULL;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (store_open(path, &s, err, sizeof err)) fail_msg("store_open: %s", err);
    repl_set_role(REPL_PRIMARY);
    repl_config cfg = {.mode = mode, .standby_timeout_s = timeout_s, .buffer_bytes = ring};
    if (repl_start(store_db(s), &cfg, err, sizeof err)) fail_msg("repl_start: %s", err);
    repl_set_event_hook(on_event, NULL);
    return s;
}

/* ---------- applying frames and comparing databases ---------- */

static int conflict(void *ctx, int kind, sqlite3_changeset_iter *it)
{
    (void)it;
    (*(int *)ctx)++;
    fprintf(stderr, "changeset conflict of kind %d\n", kind);
    return SQLITE_CHANGESET_ABORT;
}

/* Apply every frame after `after` to db (triggers off). RET the last LSN. */
static int64_t apply_frames(sqlite3 *db, int64_t after)
{
    int conflicts = 0;
    assert_int_equal(sqlite3_db_config(db, SQLITE_DBCONFIG_ENABLE_TRIGGER, 0, NULL), SQLITE_OK);
    for (;;) {
        uint8_t *buf = NULL;
        size_t len = 0, off = 0;
        int n = repl_stream_read(after, 0, REPL_STREAM_MAX, &buf, &len);
        assert_true(n >= 0);
        if (n == 0) break;
        assert_int_equal(sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK);
        for (int i = 0; i < n; i++) {
            uint64_t lsn = 0;
            uint32_t clen = 0;
            for (int k = 0; k < 8; k++) lsn = lsn << 8 | buf[off + k];
            for (int k = 0; k < 4; k++) clen = clen << 8 | buf[off + 20 + k];
            assert_int_equal((int64_t)lsn, after + 1);
            assert_int_equal(sqlite3changeset_apply(db, (int)clen, buf + off + REPL_FRAME_HDR, NULL, conflict,
                                                    &conflicts), SQLITE_OK);
            off += REPL_FRAME_HDR + clen;
            after = (int64_t)lsn;
        }
        assert_int_equal(off, len);
        assert_int_equal(sqlite3_exec(db, "COMMIT", NULL, NULL, NULL), SQLITE_OK);
        free(buf);
    }
    assert_int_equal(conflicts, 0);
    return after;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Every row of table as sorted text lines, joined (malloc'd). */
static char *dump_table(sqlite3 *db, const char *table)
{
    char sql[256];
    sqlite3_stmt *st = NULL;
    char **rows = NULL;
    size_t n = 0, total = 1;
    snprintf(sql, sizeof sql, "SELECT * FROM \"%s\"", table);
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    while (sqlite3_step(st) == SQLITE_ROW) {
        size_t cap = 64;
        for (int i = 0; i < sqlite3_column_count(st); i++) cap += (size_t)sqlite3_column_bytes(st, i) * 2 + 8;
        char *line = malloc(cap), *p = line;
        for (int i = 0; i < sqlite3_column_count(st); i++) {
            const unsigned char *b = sqlite3_column_blob(st, i);
            int bn = sqlite3_column_bytes(st, i);
            p += sprintf(p, "%d:", sqlite3_column_type(st, i));
            for (int k = 0; k < bn; k++) p += sprintf(p, "%02x", b[k]);
            *p++ = '|';
        }
        *p = 0;
        rows = realloc(rows, (n + 1) * sizeof *rows);
        rows[n++] = line;
        total += strlen(line) + 1;
    }
    sqlite3_finalize(st);
    if (n) qsort(rows, n, sizeof *rows, cmp_str);
    char *out = malloc(total), *p = out;
    *p = 0;
    for (size_t i = 0; i < n; i++) {
        p += sprintf(p, "%s\n", rows[i]);
        free(rows[i]);
    }
    free(rows);
    return out;
}

/* Both databases hold the same rows in every (non-virtual) table. RET tables compared. */
static int compare_dbs(sqlite3 *a, sqlite3 *b)
{
    sqlite3_stmt *st = NULL;
    int tables = 0;
    assert_int_equal(sqlite3_prepare_v2(a, "SELECT name FROM sqlite_schema WHERE type='table' AND "
                                           "sql NOT LIKE 'CREATE VIRTUAL%' ORDER BY name", -1, &st, NULL), SQLITE_OK);
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *t = (const char *)sqlite3_column_text(st, 0);
        char *x = dump_table(a, t), *y = dump_table(b, t);
        if (strcmp(x, y)) fail_msg("table %s differs:\nprimary:\n%.2000s\nreplica:\n%.2000s", t, x, y);
        free(x);
        free(y);
        tables++;
    }
    sqlite3_finalize(st);
    return tables;
}

/* ---------- writes through every connection ---------- */

static void core_writes(sched *c)
{
    hf_jerr je;
    json_t *out = NULL;
    int64_t agent = unit_register(c, "r1", 1);
    unit_register(c, "r2", 2);
    unit_submit(c, "{\"name\": \"rp\", \"objective\": {\"metric\": \"m\", \"goal\": \"maximize\"},"
                   "\"searcher\": {\"name\": \"random\", \"max_trials\": 1, \"seed\": 1},"
                   "\"hyperparameters\": {\"x\": {\"type\": \"uniform\", \"min\": 0, \"max\": 1}},"
                   "\"trial\": {\"command\": [\"true\"]}}");
    json_t *b = json_pack("{s[]s[]s[]}", "running", "events", "metrics");
    assert_int_equal(sched_agent_heartbeat(c, agent, b, &out, &je), 0);
    json_t *a = json_array_get(json_object_get(out, "assign"), 0);
    int64_t trial = json_integer_value(json_object_get(a, "trial_id"));
    int64_t attempt = json_integer_value(json_object_get(a, "attempt"));
    json_decref(out);
    json_decref(b);
    b = json_pack("{s[]s[{sIsIsssIsI}]s[]}", "running", "events", "trial_id", (json_int_t)trial, "attempt",
                  (json_int_t)attempt, "type", "started", "time", (json_int_t)1, "pid", (json_int_t)9, "metrics");
    assert_int_equal(sched_agent_heartbeat(c, agent, b, &out, &je), 0);
    json_decref(out);
    json_decref(b);
    /* a metric name of the longest kind (64 bytes) beside a short one */
    char longname[65];
    memset(longname, 'n', 64);
    longname[64] = 0;
    for (int step = 0; step < 5; step++) {
        b = json_pack("{s[{sIsIsi}]s[]s[{sIsIsIs{sfsf}}]s[{sIsIssss}]}", "running", "trial_id", (json_int_t)trial,
                      "attempt", (json_int_t)attempt, "rank", 0, "events", "metrics", "trial_id", (json_int_t)trial,
                      "attempt", (json_int_t)attempt, "step", (json_int_t)step, "values", "m", 0.1 * step, longname,
                      -1e300 * step, "logs", "trial_id", (json_int_t)trial, "attempt", (json_int_t)attempt, "stream",
                      "stdout", "line", "epoch done, loss falling");
        /* epochs on some reports: 1.5, and an integer one (stored REAL) */
        if (step % 2) json_object_set_new(json_array_get(json_object_get(b, "metrics"), 0), "epoch",
                                          step == 1 ? json_real(1.5) : json_integer(3));
        if (step == 4) json_object_del(json_array_get(json_object_get(b, "metrics"), 0), "step");
        if (sched_agent_heartbeat(c, agent, b, &out, &je)) fail_msg("heartbeat: %s: %s", je.field, je.msg);
        json_decref(out);
        json_decref(b);
    }
    b = json_pack("{s[]s[{sIsIsssIsi}]s[]}", "running", "events", "trial_id", (json_int_t)trial, "attempt",
                  (json_int_t)attempt, "type", "exited", "time", (json_int_t)2, "exit_code", 0, "metrics");
    assert_int_equal(sched_agent_heartbeat(c, agent, b, &out, &je), 0);
    json_decref(out);
    json_decref(b);
}

static void side_writes(store *s, sched *c)
{
    char err[256], ckdir[512], sha[65];
    ckstore *ck = NULL;
    ckretain *cr = NULL;
    webhook_svc *w = NULL;
    json_t *out = NULL;
    snprintf(ckdir, sizeof ckdir, "%s/ck", dir);
    if (ckstore_open(ckdir, store_path(s), 1 << 30, &ck, err, sizeof err)) fail_msg("ckstore_open: %s", err);
    unit_put_ckpt(ck, 1, 3, 1, "model.pt", "weights of step 3", sha);
    assert_int_equal(ckstore_context_record(ck, sha, 17), 0);
    if (ckretain_open(ck, store_path(s), 1000, 0, &cr, err, sizeof err)) fail_msg("ckretain_open: %s", err);
    assert_int_equal(ckretain_sweep(cr, 1), 0);
    if (webhook_open(store_path(s), &w, err, sizeof err)) fail_msg("webhook_open: %s", err);
    webhook_spec sp = {.url = "http://127.0.0.1:9/hook", .format = "json", .owner = "ann"};
    assert_int_equal(webhook_create(w, &sp, &out), 0);
    int64_t hook = json_integer_value(json_object_get(out, "id"));
    json_decref(out);
    assert_int_equal(webhook_test(w, hook, "ann", &out), 0);
    json_decref(out);
    /* the delivery thread's attempt (refused: port 9) records its outcome */
    int64_t t0 = hf_mono_ms();
    while (unit_one_int(store_db(s), "SELECT attempts FROM webhook_outbox LIMIT 1") < 1 && hf_mono_ms() - t0 < 10000)
        usleep(20000);
    assert_true(unit_one_int(store_db(s), "SELECT attempts FROM webhook_outbox LIMIT 1") >= 1);
    webhook_close(w);   /* before the delete: no attempt races it */
    assert_int_equal(webhook_open(store_path(s), &w, err, sizeof err), 0);
    assert_int_equal(webhook_delete(w, hook), 0);
    webhook_close(w);
    ckretain_close(cr);
    ckstore_close(ck);
    (void)c;
}

static void test_capture_apply(void **st)
{
    (void)st;
    char copy[512], err[256], sha[65];
    store *s = open_log("cap.db", REPL_ASYNC, 5, 64 << 20);
    sched *c = NULL;
    sched_config def;
    sched_config_defaults(&def);
    if (sched_new(&def, s, NULL, &c, err, sizeof err)) fail_msg("sched_new: %s", err);
    int fd = -1;
    int64_t size = 0, lsn0 = -1;
    assert_int_equal(repl_snapshot(store_path(s), &fd, &size, &lsn0, sha, err, sizeof err), 0);
    assert_true(repl_capture_on());
    assert_int_equal(lsn0, repl_lsn());
    snprintf(copy, sizeof copy, "%s/replica.db", dir);
    int out = open(copy, O_WRONLY | O_CREAT | O_EXCL, 0600);
    char hex[65];
    int64_t n = 0;
    assert_int_equal(hf_sha256_fd(fd, out, hex, &n), 0);
    assert_string_equal(hex, sha);
    assert_int_equal(n, size);
    close(fd);
    close(out);
    int64_t logged0 = repl_metric_rows_logged();
    core_writes(c);
    /* the heartbeats' metric rows went through the core's own log */
    assert_int_equal(repl_metric_rows_logged() - logged0, 10);
    side_writes(s, c);
    int64_t escaped = repl_escaped_total();

    assert_true(repl_lsn() > lsn0 + 10);
    sqlite3 *rep = NULL;
    assert_int_equal(sqlite3_open(copy, &rep), SQLITE_OK);
    assert_int_equal(apply_frames(rep, lsn0), repl_lsn());
    sqlite3 *live = NULL;
    assert_int_equal(sqlite3_open(store_path(s), &live), SQLITE_OK);
    assert_true(unit_one_int(live, "SELECT count(*) FROM logs_fts_data") > 0);
    /* each connection's writes are there: checkpoint store, retention, webhooks */
    assert_int_equal(unit_one_int(rep, "SELECT count(*) FROM checkpoints WHERE state='stored'"), 1);
    assert_int_equal(unit_one_int(rep, "SELECT count(*) FROM contexts WHERE size=17"), 1);
    assert_int_equal(unit_one_int(rep, "SELECT count(*) FROM checkpoints WHERE metrics IS NOT NULL"), 1);
    assert_int_equal(unit_one_int(rep, "SELECT count(*) FROM events WHERE user_name='ann'"), 1);
    assert_int_equal(unit_one_int(rep, "SELECT count(*) FROM webhooks"), 0);
    assert_true(compare_dbs(live, rep) >= 15);
    assert_int_equal(unit_one_int(rep, "SELECT lsn FROM repl_state"), repl_lsn());
    assert_int_equal(unit_one_int(rep, "SELECT count(*) FROM metrics"), 10);
    assert_int_equal(unit_one_int(rep, "SELECT count(*) FROM metrics WHERE epoch IS NOT NULL"), 4);
    assert_int_equal(unit_one_int(rep, "SELECT count(*) FROM metrics WHERE step IS NULL"), 2);
    assert_int_equal(unit_one_int(rep, "SELECT count(*) FROM logs_fts WHERE line LIKE '%loss fal%'"), 5);
    /* deleting the experiment: the purge's DELETEs from metrics go
     * through the session (its own transactions) */
    hf_jerr je;
    assert_int_equal(sched_experiment_delete(c, 1, &je), 0);
    sched_stats ss;
    for (int k = 0; k < 100; k++) {
        sched_get_stats(c, &ss);
        if (ss.experiments_purging == 0) break;
        sched_tick(c);
    }
    sched_get_stats(c, &ss);
    assert_int_equal(ss.experiments_purging, 0);
    sched_free(c);
    int64_t lsn1 = unit_one_int(rep, "SELECT lsn FROM repl_state");
    assert_int_equal(apply_frames(rep, lsn1), repl_lsn());
    assert_true(compare_dbs(live, rep) >= 15);
    assert_int_equal(unit_one_int(rep, "SELECT count(*) FROM metrics"), 0);   /* purged on both */
    assert_int_equal(escaped, 0);
    sqlite3_close(rep);
    sqlite3_close(live);
    store_close(s);
}

/* ---------- empty and failed transactions ---------- */

static int failing_commit(void *arg)
{
    (void)arg;
    return HF_EIO;
}

static void test_empty_and_failed(void **st)
{
    (void)st;
    store *s = open_log("empty.db", REPL_ASYNC, 5, 64 << 20);
    repl_capture_enable();
    repl_status a, b;
    repl_status_get(&a);
    assert_int_equal(store_begin(s), 0);
    assert_int_equal(store_commit(s), 0);
    repl_status_get(&b);
    assert_int_equal(b.lsn, a.lsn);
    assert_int_equal(b.ring_frames, a.ring_frames);
    assert_int_equal(unit_one_int(store_db(s), "SELECT lsn FROM repl_state"), a.lsn);
    /* A COMMIT that fails: nothing appended, the LSN stays (also on disk once rolled back). */
    repl_conn *rc = repl_conn_new(store_db(s));
    assert_int_equal(sqlite3_exec(store_db(s), "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK);
    assert_int_equal(repl_conn_begin(rc), 0);
    assert_int_equal(sqlite3_exec(store_db(s), "INSERT INTO events(time,type,detail) VALUES(1,'X','y')", NULL, NULL,
                                  NULL), SQLITE_OK);
    assert_int_equal(repl_conn_commit(rc, failing_commit, NULL), HF_EIO);
    assert_int_equal(sqlite3_exec(store_db(s), "ROLLBACK", NULL, NULL, NULL), SQLITE_OK);
    repl_status_get(&b);
    assert_int_equal(b.lsn, a.lsn);
    assert_int_equal(b.ring_frames, a.ring_frames);
    assert_int_equal(unit_one_int(store_db(s), "SELECT lsn FROM repl_state"), a.lsn);
    /* and the next real one is a.lsn + 1 */
    assert_int_equal(sqlite3_exec(store_db(s), "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK);
    assert_int_equal(repl_conn_begin(rc), 0);
    assert_int_equal(sqlite3_exec(store_db(s), "INSERT INTO events(time,type,detail) VALUES(1,'X','y')", NULL, NULL,
                                  NULL), SQLITE_OK);
    assert_int_equal(repl_txn_commit(rc), 0);
    assert_int_equal(repl_lsn(), a.lsn + 1);
    /* an autocommit write on a captured connection is seen as escaped */
    int64_t esc = repl_escaped_total();
    assert_int_equal(sqlite3_exec(store_db(s), "INSERT INTO events(time,type,detail) VALUES(1,'X','z')", NULL, NULL,
                                  NULL), SQLITE_OK);
    assert_int_equal(repl_escaped_total(), esc + 1);
    repl_conn_free(rc);
    store_close(s);
}

/* ---------- a snapshot racing a commit ---------- */

typedef struct snap_race {
    store    *s;
    pthread_t th;
    int64_t   snap_lsn, lsn_after;   /* the snapshot's LSN; repl_lsn() when it returned */
    int       snap_rc, stream_rc;    /* repl_snapshot's; repl_stream_read(snap_lsn)'s then */
} snap_race;

static void *snap_thread(void *arg)
{
    snap_race *r = arg;
    char sha[65], err[256];
    int fd = -1;
    int64_t size = 0;
    r->snap_rc = repl_snapshot(store_path(r->s), &fd, &size, &r->snap_lsn, sha, err, sizeof err);   /* asserted by the caller */
    r->lsn_after = repl_lsn();
    uint8_t *buf = NULL;
    size_t len = 0;
    r->stream_rc = repl_stream_read(r->snap_lsn, 0, REPL_STREAM_MAX, &buf, &len);
    free(buf);
    close(fd);
    return NULL;
}

/* COMMIT, then a snapshot starts while this commit's LSN is not yet in
 * the ring, and the committer lingers (preempted) before appending. */
static int lingering_commit(void *arg)
{
    snap_race *r = arg;
    int rc = sqlite3_exec(store_db(r->s), "COMMIT", NULL, NULL, NULL) == SQLITE_OK ? 0 : HF_EDB;
    if (pthread_create(&r->th, NULL, snap_thread, r)) return HF_ENOMEM;
    usleep(400 * 1000);
    return rc;
}

/* The snapshot's LSN is never ahead of the ring: a standby that
 * bootstraps from it and streams after= that LSN is not told "ahead". */
static void test_snapshot_race(void **st)
{
    (void)st;
    snap_race r = {.s = open_log("race.db", REPL_ASYNC, 5, 64 << 20)};
    repl_capture_enable();
    repl_conn *rc = repl_conn_new(store_db(r.s));
    int64_t before = repl_lsn();
    assert_int_equal(sqlite3_exec(store_db(r.s), "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK);
    assert_int_equal(repl_conn_begin(rc), 0);
    assert_int_equal(sqlite3_exec(store_db(r.s), "INSERT INTO events(time,type,detail) VALUES(1,'X','y')", NULL, NULL,
                                  NULL), SQLITE_OK);
    assert_int_equal(repl_conn_commit(rc, lingering_commit, &r), 0);
    pthread_join(r.th, NULL);
    assert_int_equal(repl_lsn(), before + 1);
    assert_int_equal(r.snap_rc, 0);
    assert_true(r.snap_lsn <= r.lsn_after);
    assert_true(r.stream_rc >= 0);   /* not HF_EINVAL ("ahead") */
    repl_conn_free(rc);
    store_close(r.s);
}

/* One transaction of the core's writer inserting an event of bytes bytes. */
static void big_txn(store *s, int bytes)
{
    char *d = malloc((size_t)bytes + 1);
    memset(d, 'x', (size_t)bytes);
    d[bytes] = 0;
    sqlite3_stmt *q = NULL;
    assert_int_equal(store_begin(s), 0);
    assert_int_equal(sqlite3_prepare_v2(store_db(s), "INSERT INTO events(time,type,detail) VALUES(1,'BIG',?)", -1, &q,
                                        NULL), SQLITE_OK);
    sqlite3_bind_text(q, 1, d, -1, SQLITE_TRANSIENT);
    assert_int_equal(store_exec_stmt(q), 0);
    sqlite3_finalize(q);
    assert_int_equal(store_commit(s), 0);
    free(d);
}

static void test_ring_overflow(void **st)
{
    (void)st;
    store *s = open_log("ring.db", REPL_ASYNC, 5, 1 << 20);
    repl_capture_enable();
    int64_t first = repl_lsn();
    for (int i = 0; i < 30; i++) big_txn(s, 100000);
    repl_status r;
    repl_status_get(&r);
    assert_true(r.ring_bytes <= 1 << 20);
    assert_true(r.ring_first > first + 1);
    uint8_t *buf = NULL;
    size_t len = 0;
    assert_int_equal(repl_stream_read(first, 0, REPL_STREAM_MAX, &buf, &len), HF_ENOTFOUND);
    assert_int_equal(repl_stream_read(repl_lsn() + 1, 0, REPL_STREAM_MAX, &buf, &len), HF_EINVAL);
    int n = repl_stream_read(r.ring_first - 1, 0, 250000, &buf, &len);
    assert_int_equal(n, 2);   /* at most max bytes, at least one frame */
    free(buf);
    n = repl_stream_read(r.ring_first - 1, 0, 10, &buf, &len);
    assert_int_equal(n, 1);
    free(buf);
    assert_int_equal(repl_stream_read(repl_lsn(), 0, REPL_STREAM_MAX, &buf, &len), 0);
    store_close(s);
}

/* Rows written before capture on a database a standby may hold at its
 * LSN: the first capture marks a gap (the LSN moves past them, older
 * frames are gone), and a database whose LSN is past 0 captures from its
 * start, so a restarted primary's standby follows on without them lost. */
static void test_capture_gap(void **st)
{
    (void)st;
    uint8_t *buf = NULL;
    size_t len = 0;
    store *s = open_log("nogap.db", REPL_ASYNC, 5, 1 << 20);
    assert_int_equal(repl_capture_on(), 0);
    repl_capture_enable();
    assert_int_equal(repl_lsn(), 0);   /* nothing written before: no gap */
    repl_stop();
    store_close(s);

    s = open_log("gap.db", REPL_ASYNC, 5, 1 << 20);
    assert_int_equal(repl_capture_on(), 0);
    big_txn(s, 10);                    /* in no frame */
    assert_int_equal(repl_lsn(), 0);
    repl_capture_enable();
    assert_int_equal(repl_lsn(), 1);
    assert_int_equal(repl_stream_read(0, 0, REPL_STREAM_MAX, &buf, &len), HF_ENOTFOUND);
    assert_int_equal(repl_stream_read(1, 0, REPL_STREAM_MAX, &buf, &len), 0);
    big_txn(s, 10);
    assert_int_equal(repl_lsn(), 2);
    repl_stop();
    store_close(s);

    s = open_log("gap.db", REPL_ASYNC, 5, 1 << 20);   /* a restart: LSN 2 */
    assert_int_equal(repl_capture_on(), 1);
    big_txn(s, 10);
    assert_int_equal(repl_lsn(), 3);
    assert_int_equal(repl_stream_read(2, 0, REPL_STREAM_MAX, &buf, &len), 1);
    free(buf);
    store_close(s);
}

/* ---------- acknowledgements ---------- */

static void *ack_later(void *arg)
{
    usleep(150000);
    repl_standby_ack(*(int64_t *)arg, NULL, NULL);
    return NULL;
}

static atomic_int woken;
static void wake_flag(void *arg) { (void)arg; atomic_fetch_add(&woken, 1); }
static void park_nop(void *arg) { (void)arg; }

/* A stream poll woken by a commit: repl_lsn() then already says that
 * commit's LSN (else the standby's next request, after= that frame, would
 * be told "ahead"). */
static _Atomic int64_t lsn_at_wake = -1;
static void wake_lsn(void *arg) { (void)arg; atomic_store(&lsn_at_wake, repl_lsn()); }

static void test_wake_lsn(void **st)
{
    (void)st;
    store *s = open_log("wake.db", REPL_ASYNC, 5, 64 << 20);
    repl_capture_enable();
    int64_t before = repl_lsn();
    repl_waiter sw = {.kind = REPL_W_STREAM, .lsn = before, .wait_ms = 5000, .wake = wake_lsn};
    assert_int_equal(repl_park(&sw, park_nop), 1);
    big_txn(s, 10);
    assert_int_equal(repl_lsn(), before + 1);
    assert_int_equal(atomic_load(&lsn_at_wake), before + 1);
    uint8_t *buf = NULL;
    size_t len = 0;
    assert_int_equal(repl_stream_read(before, 0, REPL_STREAM_MAX, &buf, &len), 1);
    free(buf);
    assert_true(repl_lsn() >= before + 1);   /* the api's "ahead" check would pass for after = before + 1 */
    store_close(s);
}

static void test_ack_wait(void **st)
{
    (void)st;
    store *s = open_log("ack.db", REPL_SYNC, 1, 64 << 20);
    repl_capture_enable();
    repl_status r;
    repl_status_get(&r);
    assert_int_equal(r.state, REPL_ST_NONE);
    assert_int_equal(repl_wait(repl_lsn() + 5), 0);   /* none: no wait */
    repl_standby_ack(repl_lsn(), NULL, NULL);
    repl_status_get(&r);
    assert_int_equal(r.state, REPL_ST_SYNC);
    big_txn(s, 10);
    int64_t want = repl_lsn();
    pthread_t th;
    pthread_create(&th, NULL, ack_later, &want);
    int64_t t0 = hf_mono_ms();
    assert_int_equal(repl_wait(want), 0);
    int64_t waited = hf_mono_ms() - t0;
    pthread_join(th, NULL);
    assert_true(waited >= 100 && waited < 900);
    /* a parked request is woken by the ack */
    big_txn(s, 10);
    repl_waiter w = {.kind = REPL_W_ACK, .lsn = repl_lsn(), .wake = wake_flag};
    atomic_store(&woken, 0);
    assert_int_equal(repl_park(&w, park_nop), 1);
    assert_int_equal(atomic_load(&woken), 0);
    repl_standby_ack(repl_lsn(), NULL, NULL);
    assert_int_equal(atomic_load(&woken), 1);
    /* no ack within --standby-timeout: degraded, and later writes do not wait */
    big_txn(s, 10);
    t0 = hf_mono_ms();
    assert_int_equal(repl_wait(repl_lsn()), HF_ETIMEOUT);
    waited = hf_mono_ms() - t0;
    assert_true(waited >= 900 && waited < 3000);
    repl_status_get(&r);
    assert_int_equal(r.state, REPL_ST_DEGRADED);
    assert_int_equal(r.degraded_total, 1);
    assert_non_null(strstr(events, "REPLICATION_DEGRADED;"));
    big_txn(s, 10);
    t0 = hf_mono_ms();
    assert_int_equal(repl_wait(repl_lsn()), 0);
    assert_true(hf_mono_ms() - t0 < 100);
    /* the standby comes back and catches up: sync again */
    repl_standby_ack(repl_lsn() - 1, NULL, NULL);
    repl_status_get(&r);
    assert_int_equal(r.state, REPL_ST_CATCHING_UP);
    repl_standby_ack(repl_lsn(), NULL, NULL);
    repl_status_get(&r);
    assert_int_equal(r.state, REPL_ST_SYNC);
    /* a parked stream poll is woken by the next commit, or after its wait */
    repl_waiter sw = {.kind = REPL_W_STREAM, .lsn = repl_lsn(), .wait_ms = 5000, .wake = wake_flag};
    atomic_store(&woken, 0);
    assert_int_equal(repl_park(&sw, park_nop), 1);
    repl_set_role(REPL_PRIMARY);
    repl_standby_ack(repl_lsn(), NULL, NULL);
    big_txn(s, 10);
    assert_int_equal(atomic_load(&woken), 1);
    repl_waiter sw2 = {.kind = REPL_W_STREAM, .lsn = repl_lsn(), .wait_ms = 200, .wake = wake_flag};
    assert_int_equal(repl_park(&sw2, park_nop), 1);
    t0 = hf_mono_ms();
    while (atomic_load(&woken) < 2 && hf_mono_ms() - t0 < 2000) usleep(10000);
    assert_int_equal(atomic_load(&woken), 2);
    store_close(s);
}

/* The group flush (repl.h; docs/scheduler.md "Durability"): the real
 * flush thread makes commits durable; a write's parked answer waits for
 * the flush as well as for the standby, a flush alone never degrades the
 * standby, and a failed flush is sticky and fails the held answers. */
static void test_group_flush(void **st)
{
    (void)st;
    store *s = open_log("flush.db", REPL_SYNC, 1, 64 << 20);
    assert_int_equal(store_set_sync(s, STORE_SYNC_FULL), 0);
    assert_int_equal(repl_flush_on(), 1);
    big_txn(s, 10);
    assert_int_equal(store_wait_durable(s), 0);
    repl_status r;
    repl_status_get(&r);
    assert_true(r.flush_on && r.flushes >= 1 && r.flush_commits >= 1 && !r.flush_failed);   /* fsyncs ran, none failed */

    /* The waiter logic, with the flush thread stopped and the flush
     * reported by hand: commits are still numbered by the WAL hook. */
    assert_int_equal(store_set_sync(s, STORE_SYNC_NORMAL), 0);
    assert_int_equal(repl_flush_on(), 0);
    repl_flush_enable(1);
    uint64_t seq0 = repl_commit_seq();
    big_txn(s, 10);
    uint64_t seq = repl_commit_seq();
    assert_true(seq == seq0 + 1);
    repl_waiter w = {.kind = REPL_W_ACK, .lsn = repl_lsn(), .seq = seq, .wake = wake_flag};
    atomic_store(&woken, 0);
    assert_int_equal(repl_park(&w, park_nop), 1);   /* no standby: the flush alone holds it */
    repl_flushed(seq - 1, 0);
    assert_int_equal(atomic_load(&woken), 0);
    repl_flushed(seq, 0);
    assert_int_equal(atomic_load(&woken), 1);
    assert_int_equal(w.failed, 0);
    assert_int_equal(repl_flush_wait(seq), 0);

    /* With a standby in sync that holds the commit, a slow flush keeps the
     * answer held past --standby-timeout without degrading the standby. */
    repl_standby_ack(repl_lsn(), NULL, NULL);
    big_txn(s, 10);
    repl_standby_ack(repl_lsn(), NULL, NULL);
    repl_status_get(&r);
    assert_int_equal(r.state, REPL_ST_SYNC);
    repl_waiter w2 = {.kind = REPL_W_ACK, .lsn = repl_lsn(), .seq = repl_commit_seq(), .wake = wake_flag};
    atomic_store(&woken, 0);
    assert_int_equal(repl_park(&w2, park_nop), 1);
    for (int i = 0; i < 14; i++) {   /* 1.4 s: the standby keeps asking, the flush does not come */
        usleep(100000);
        repl_standby_ack(repl_lsn(), NULL, NULL);
    }
    repl_status_get(&r);
    assert_int_equal(r.state, REPL_ST_SYNC);
    assert_int_equal(atomic_load(&woken), 0);
    repl_flushed(w2.seq, 0);
    assert_int_equal(atomic_load(&woken), 1);
    assert_int_equal(w2.failed, 0);

    /* A failed flush: the held answer is woken as failed, the failure is
     * sticky, a later answer is not held but failed at once. */
    big_txn(s, 10);
    repl_standby_ack(repl_lsn(), NULL, NULL);
    repl_waiter w3 = {.kind = REPL_W_ACK, .lsn = repl_lsn(), .seq = repl_commit_seq(), .wake = wake_flag};
    atomic_store(&woken, 0);
    assert_int_equal(repl_park(&w3, park_nop), 1);
    repl_flushed(0, 1);
    assert_int_equal(atomic_load(&woken), 1);
    assert_int_equal(w3.failed, 1);
    assert_int_equal(repl_flush_failed(), 1);
    assert_int_equal(store_wait_durable(s), HF_EIO);
    repl_waiter w4 = {.kind = REPL_W_ACK, .lsn = repl_lsn(), .seq = repl_commit_seq(), .wake = wake_flag};
    assert_int_equal(repl_park(&w4, park_nop), 0);
    assert_int_equal(w4.failed, 1);
    repl_status_get(&r);
    assert_int_equal(r.flush_failed, 1);
    /* without the group flush nothing waits for it */
    repl_flush_enable(0);
    assert_int_equal(store_wait_durable(s), 0);
    store_close(s);
}

/* ---------- the snapshot service (thread "hf-snapshot") ---------- */

typedef struct snap_call {
    atomic_int done;
} snap_call;

static void snap_done(void *arg) { atomic_fetch_add(&((snap_call *)arg)->done, 1); }

/* Wait up to 10 s for c's done. RET its count. */
static int snap_wait(snap_call *c)
{
    int64_t t0 = hf_mono_ms();
    while (!atomic_load(&c->done) && hf_mono_ms() - t0 < 10000) usleep(5000);
    return atomic_load(&c->done);
}

static void *stop_later(void *arg)
{
    (void)arg;
    repl_snap_stop();
    return NULL;
}

/* The copy runs on the service's thread, one at a time: a second submit
 * while one runs is refused with a retry estimate; stopping ends a
 * running copy (done once, HF_ESTATE) and refuses later submits; a whole
 * copy hands over a file whose hash is its sha; the slot is free again
 * once a copy ended or a job was released unarmed; a client that hung up
 * ends its copy (HF_ECONN). */
static void test_snapshot_service(void **st)
{
    (void)st;
    char err[256], sha[65], hex[65];
    int fd = -1, retry_s = 0;
    int64_t size = 0, lsn = -1, n = 0;
    repl_snap_job *a = NULL, *b = NULL;
    store *s = open_log("svc.db", REPL_ASYNC, 5, 64 << 20);
    snap_call ca = {0}, cb = {0};
    assert_int_equal(repl_snap_submit(store_path(s), "t", -1, snap_done, &ca, &a, &retry_s), HF_ESTATE);   /* not started */
    repl_snap_start();

    /* A transaction begun before capture holds the copy in
     * repl_capture_enable on the service's thread: it is running. */
    assert_int_equal(repl_capture_on(), 0);
    assert_int_equal(store_begin(s), 0);
    assert_int_equal(repl_snap_submit(store_path(s), "a", -1, snap_done, &ca, &a, &retry_s), 0);
    repl_snap_arm(a);
    int64_t t0 = hf_mono_ms();
    while (!repl_capture_on() && hf_mono_ms() - t0 < 5000) usleep(1000);
    assert_int_equal(repl_capture_on(), 1);   /* the thread took the job */
    assert_int_equal(repl_snap_submit(store_path(s), "b", -1, snap_done, &cb, &b, &retry_s), HF_ETOOBIG);
    assert_null(b);
    assert_true(retry_s >= 1 && retry_s <= 60);
    /* stop while it runs: the stop waits for the copy, which ends at its first slice */
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, stop_later, NULL), 0);
    usleep(100 * 1000);
    assert_int_equal(atomic_load(&ca.done), 0);
    assert_int_equal(store_commit(s), 0);
    pthread_join(th, NULL);
    assert_int_equal(atomic_load(&ca.done), 1);
    assert_int_equal(repl_snap_result(a, &fd, &size, &lsn, sha, err, sizeof err), HF_ESTATE);
    assert_int_equal(fd, -1);
    repl_snap_release(a);
    assert_int_equal(repl_snap_submit(store_path(s), "c", -1, snap_done, &cb, &b, &retry_s), HF_ESTATE);

    /* started again: a whole copy */
    repl_snap_start();
    big_txn(s, 100000);
    snap_call cc = {0};
    assert_int_equal(repl_snap_submit(store_path(s), "c", -1, snap_done, &cc, &a, &retry_s), 0);
    repl_snap_arm(a);
    assert_int_equal(snap_wait(&cc), 1);
    assert_int_equal(repl_snap_result(a, &fd, &size, &lsn, sha, err, sizeof err), 0);
    repl_snap_release(a);
    assert_true(fd >= 0 && size > 100000);
    assert_int_equal(lsn, repl_lsn());
    assert_int_equal(hf_sha256_fd(fd, -1, hex, &n), 0);
    assert_string_equal(hex, sha);
    assert_int_equal(n, size);
    close(fd);
    /* the slot is free again; a job released before it was armed frees it too */
    snap_call cd = {0}, ce = {0};
    assert_int_equal(repl_snap_submit(store_path(s), "d", -1, snap_done, &cd, &a, &retry_s), 0);
    repl_snap_release(a);
    /* a client that hung up: its copy ends at the first check */
    int sp[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sp), 0);
    close(sp[1]);
    assert_int_equal(repl_snap_submit(store_path(s), "e", sp[0], snap_done, &ce, &a, &retry_s), 0);
    repl_snap_arm(a);
    assert_int_equal(snap_wait(&ce), 1);
    assert_int_equal(repl_snap_result(a, &fd, &size, &lsn, sha, err, sizeof err), HF_ECONN);
    repl_snap_release(a);
    close(sp[0]);
    assert_int_equal(atomic_load(&cd.done), 0);   /* never armed: never done */
    repl_snap_stop();
    repl_snap_stop();   /* idempotent */
    store_close(s);
}

/* ---------- the standbys a primary saw ---------- */

/* One entry per address and name, the last seen first, each with its own ack and
 * state: sync once it reached the LSN current when it connected,
 * catching_up before, lost after --standby-timeout of silence (and
 * catching up again when it returns behind); at most REPL_STANDBYS_MAX,
 * the one silent longest replaced. */
static void test_standby_list(void **st)
{
    (void)st;
    store *s = open_log("list.db", REPL_SYNC, 1, 64 << 20);
    repl_capture_enable();
    repl_status r;
    repl_status_get(&r);
    assert_int_equal(r.nstandbys, 0);
    big_txn(s, 10);
    int64_t l1 = repl_lsn();
    repl_standby_ack(l1, "10.0.0.1", "");
    big_txn(s, 10);
    usleep(2 * 1000);   /* "last seen" is in ms: two acks in one ms would not be ordered */
    repl_standby_ack(l1, "10.0.0.2", "");   /* behind what was current when it connected */
    repl_status_get(&r);
    assert_int_equal(r.nstandbys, 2);
    assert_string_equal(r.standbys[0].address, "10.0.0.2");
    assert_string_equal(r.standbys[0].state, "catching_up");
    assert_int_equal(r.standbys[0].acked_lsn, l1);
    assert_string_equal(r.standbys[1].address, "10.0.0.1");
    assert_string_equal(r.standbys[1].state, "sync");
    assert_int_equal(r.standbys[1].acked_lsn, l1);
    assert_true(r.standbys[1].last_seen_ms_ago >= r.standbys[0].last_seen_ms_ago);
    repl_standby_ack(repl_lsn(), "10.0.0.2", "");
    usleep(1100 * 1000);
    repl_standby_ack(repl_lsn(), "10.0.0.2", "");
    repl_status_get(&r);
    assert_string_equal(r.standbys[0].state, "sync");
    assert_string_equal(r.standbys[1].address, "10.0.0.1");
    assert_string_equal(r.standbys[1].state, "lost");
    assert_true(r.standbys[1].last_seen_ms_ago >= 1000);
    big_txn(s, 10);
    repl_standby_ack(l1, "10.0.0.1", "");   /* back, behind */
    repl_status_get(&r);
    assert_string_equal(r.standbys[0].address, "10.0.0.1");
    assert_string_equal(r.standbys[0].state, "catching_up");
    repl_standby_ack(repl_lsn(), "10.0.0.1", "");
    repl_status_get(&r);
    assert_string_equal(r.standbys[0].state, "sync");
    for (int i = 0; i < REPL_STANDBYS_MAX; i++) {
        char a[32];
        snprintf(a, sizeof a, "10.0.1.%d", i);
        usleep(2 * 1000);   /* each seen after the last: the one silent longest is replaced */
        repl_standby_ack(repl_lsn(), a, "");
    }
    repl_status_get(&r);
    assert_int_equal(r.nstandbys, REPL_STANDBYS_MAX);
    assert_string_equal(r.standbys[0].address, "10.0.1.7");
    for (int i = 0; i < r.nstandbys; i++) assert_non_null(strstr(r.standbys[i].address, "10.0.1."));
    /* Two standbys behind one address (one host, or one NAT) are two
     * entries by their names, each with its own ack and state. */
    int64_t l2 = repl_lsn();
    big_txn(s, 10);
    usleep(2 * 1000);
    repl_standby_ack(repl_lsn(), "10.0.2.1", "sb-a:8080");
    usleep(2 * 1000);
    repl_standby_ack(l2, "10.0.2.1", "sb-b:8081");
    repl_status_get(&r);
    assert_string_equal(r.standbys[0].address, "10.0.2.1");
    assert_string_equal(r.standbys[0].name, "sb-b:8081");
    assert_string_equal(r.standbys[0].state, "catching_up");
    assert_int_equal(r.standbys[0].acked_lsn, l2);
    assert_string_equal(r.standbys[1].address, "10.0.2.1");
    assert_string_equal(r.standbys[1].name, "sb-a:8080");
    assert_string_equal(r.standbys[1].state, "sync");
    usleep(2 * 1000);
    repl_standby_ack(repl_lsn(), "10.0.2.1", "sb-a:8080");   /* the same one again: still two */
    repl_status_get(&r);
    assert_string_equal(r.standbys[0].name, "sb-a:8080");
    assert_string_equal(r.standbys[1].name, "sb-b:8081");
    assert_string_equal(r.standbys[1].address, "10.0.2.1");
    store_close(s);
}

static void test_fence(void **st)
{
    (void)st;
    store *s = open_log("fence.db", REPL_SYNC, 5, 64 << 20);
    int64_t t = repl_term();
    assert_int_equal(t, 1);
    repl_observe_term(t);
    repl_observe_term(t - 1);
    assert_int_equal(repl_role(), REPL_PRIMARY);
    repl_observe_term(t + 1);
    assert_int_equal(repl_role(), REPL_FENCED);
    assert_non_null(strstr(events, "FENCED;"));
    repl_status r;
    repl_status_get(&r);
    assert_int_equal(r.fenced_total, 1);
    repl_set_role(REPL_PRIMARY);
    store_close(s);
}

static void test_frame_header(void **st)
{
    (void)st;
    uint8_t h[REPL_FRAME_HDR];
    repl_frame_header(h, 0x0102030405060708LL, 3, 0xAABBCCDD);
    static const uint8_t want[REPL_FRAME_HDR] = {1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 0, 0, 0, 0, 3,
                                                 0, 0, 0, 0, 0xAA, 0xBB, 0xCC, 0xDD};
    assert_memory_equal(h, want, sizeof want);
    int m = -1;
    assert_int_equal(repl_mode_parse("async", &m), 0);
    assert_int_equal(m, REPL_ASYNC);
    assert_int_equal(repl_mode_parse("sometimes", &m), HF_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_frame_header),
        cmocka_unit_test_setup_teardown(test_capture_apply, setup, teardown),
        cmocka_unit_test_setup_teardown(test_empty_and_failed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_snapshot_race, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wake_lsn, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ring_overflow, setup, teardown),
        cmocka_unit_test_setup_teardown(test_capture_gap, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ack_wait, setup, teardown),
        cmocka_unit_test_setup_teardown(test_group_flush, setup, teardown),
        cmocka_unit_test_setup_teardown(test_snapshot_service, setup, teardown),
        cmocka_unit_test_setup_teardown(test_standby_list, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fence, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
