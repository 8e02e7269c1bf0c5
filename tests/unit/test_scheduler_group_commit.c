/*
 * test_scheduler_group_commit.c — heartbeats from many threads at once
 * (group commit: a heartbeat that finds others queued for the core lock
 * leaves its transaction open and answers only after the COMMIT that
 * includes it), and the store's checkpointer thread.
 *
 *   - 16 threads, each one agent with 4 slots, drive a 240-trial random
 *     experiment through the real core on a real store by calling the
 *     heartbeat entry point concurrently: every trial completes exactly
 *     once, every acknowledged metric report is in the database after the
 *     core is closed (read back with a separate SQLite connection), and
 *     heartbeats did share commits (hyperfarm_heartbeats_grouped_total).
 *   - a group whose COMMIT fails: the database is made full (PRAGMA
 *     max_page_count) while 8 threads send heartbeats full of metrics, so
 *     some heartbeats fit in existing pages and are deferred, and a later
 *     one of their group fails; every heartbeat of a failed group must get
 *     the error (HF_ENOSPC), none an acknowledgement: after space returns,
 *     the metrics table holds exactly the acknowledged reports.
 *   - the WAL is checkpointed by the store's own thread: after more than
 *     1000 pages of commits the checkpointer has run and the database
 *     file itself holds the rows (its size grew), while the writer never
 *     checkpointed in a COMMIT.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "hf_err.h"
#include "hf_log.h"
#include "hf_time.h"
#include "scheduler/api/metrics.h"
#include "scheduler/core/sched.h"
#include "scheduler/store/store.h"
#include "tests/unit/unit_fixture.h"

#include <pthread.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define THREADS 16
#define SLOTS 4
#define TRIALS 240

static char dir[256];

static int setup(void **st) { (void)st; return unit_tmpdir(dir, sizeof dir, "group"); }
static int teardown(void **st) { (void)st; return unit_rmtree(dir); }

/* unit_one_int on a read-only connection of its own. */
static int64_t one_int(const char *path, const char *sql)
{
    sqlite3 *db = NULL;
    int64_t v = -1;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK) v = unit_one_int(db, sql);
    sqlite3_close(db);
    return v;
}

typedef struct player {
    sched *c;
    int64_t agent;
    long acked_reports, assignments, errors;
} player;

static atomic_long trials_done;

/* One agent: every heartbeat reports what the previous reply assigned as
 * started, one metric report and exited, then takes new assignments. */
static void *play(void *arg)
{
    player *p = arg;
    json_t *run = json_array();   /* [[trial, attempt]...] accepted, to finish next heartbeat */
    int64_t t0 = hf_mono_ms();
    while (atomic_load(&trials_done) < TRIALS && hf_mono_ms() - t0 < 60000) {
        json_t *body = json_pack("{s[]s[]s[]}", "running", "events", "metrics");
        json_t *evs = json_object_get(body, "events"), *mets = json_object_get(body, "metrics");
        size_t i;
        json_t *r;
        json_array_foreach(run, i, r) {
            json_int_t tid = json_integer_value(json_array_get(r, 0)), att = json_integer_value(json_array_get(r, 1));
            json_array_append_new(evs, json_pack("{sIsIsssIsI}", "trial_id", tid, "attempt", att, "type", "started",
                                                 "time", (json_int_t)1, "pid", (json_int_t)100));
            json_array_append_new(evs, json_pack("{sIsIsssIsIsI}", "trial_id", tid, "attempt", att, "type", "exited",
                                                 "time", (json_int_t)2, "pid", (json_int_t)100, "exit_code",
                                                 (json_int_t)0));
            json_array_append_new(mets, json_pack("{sIsIsIsIs{sf}}", "trial_id", tid, "attempt", att, "step",
                                                  (json_int_t)10, "epoch", (json_int_t)1, "values", "m",
                                                  (double)tid / 1000.0));
        }
        json_t *out = NULL;
        hf_jerr e;
        int rc = sched_agent_heartbeat(p->c, p->agent, body, &out, &e);
        if (rc == 0) {
            p->acked_reports += (long)json_array_size(mets);
            atomic_fetch_add(&trials_done, (long)json_array_size(run));
            json_array_clear(run);
            json_t *as = json_object_get(out, "assign");
            json_array_foreach(as, i, r) {
                json_array_append_new(run, json_pack("[OO]", json_object_get(r, "trial_id"),
                                                     json_object_get(r, "attempt")));
                p->assignments++;
            }
        } else {
            p->errors++;
        }
        json_decref(out);
        json_decref(body);
        if (json_array_size(run) == 0) usleep(200);
    }
    json_decref(run);
    return NULL;
}

static void test_concurrent_heartbeats_group_commit(void **state)
{
    (void)state;
    char path[320];
    snprintf(path, sizeof path, "%s/group.db", dir);
    store *s = NULL;
    sched *c = NULL;
    unit_open_core(path, NULL, &s, &c);
    uint64_t grouped0 = atomic_load(&metrics.heartbeats_grouped);

    player pl[THREADS];
    memset(pl, 0, sizeof pl);
    for (int i = 0; i < THREADS; i++) {
        char name[16];
        snprintf(name, sizeof name, "g%d", i);
        pl[i].c = c;
        pl[i].agent = unit_register(c, name, SLOTS);
    }
    char exp[512];
    snprintf(exp, sizeof exp,
             "{\"name\": \"g\", \"objective\": {\"metric\": \"m\", \"goal\": \"maximize\"},"
             "\"searcher\": {\"name\": \"random\", \"max_trials\": %d, \"seed\": 3},"
             "\"hyperparameters\": {\"x\": {\"type\": \"uniform\", \"min\": 0, \"max\": 1}},"
             "\"trial\": {\"command\": [\"true\"]}}", TRIALS);
    int64_t xid = unit_submit(c, exp);

    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++) assert_int_equal(pthread_create(&th[i], NULL, play, &pl[i]), 0);
    for (int i = 0; i < THREADS; i++) pthread_join(th[i], NULL);

    long acked = 0, assigned = 0, errors = 0;
    for (int i = 0; i < THREADS; i++) {
        acked += pl[i].acked_reports;
        assigned += pl[i].assignments;
        errors += pl[i].errors;
    }
    uint64_t grouped = atomic_load(&metrics.heartbeats_grouped) - grouped0;
    fprintf(stderr, "group commit: %ld trials, %ld assignments, %ld reports acked, %llu heartbeats grouped\n",
            (long)atomic_load(&trials_done), assigned, acked, (unsigned long long)grouped);
    assert_int_equal(errors, 0);
    assert_int_equal(atomic_load(&trials_done), TRIALS);
    assert_int_equal(assigned, TRIALS);   /* every trial placed exactly once */
    assert_int_equal(acked, TRIALS);
    assert_true(grouped > 0);             /* 16 threads on one lock: some shared a COMMIT */

    json_t *x = NULL;
    assert_int_equal(sched_experiment_get(c, xid, &x), 0);
    assert_string_equal(json_string_value(json_object_get(x, "state")), "COMPLETED");
    json_decref(x);
    sched_free(c);
    store_close(s);

    /* Acknowledged means stored: read back with another connection. */
    assert_int_equal(one_int(path, "SELECT count(*) FROM metrics"), acked);
    assert_int_equal(one_int(path, "SELECT count(*) FROM trials WHERE state='COMPLETED'"), TRIALS);
    assert_int_equal(one_int(path, "SELECT count(*) FROM allocations"), TRIALS);
}

/* ---- a failing group ---- */

#define FULL_THREADS 8
#define FULL_REPORTS 40

typedef struct reporter {
    sched *c;
    int64_t agent, trial, attempt;
    int step;
    long acked, failed, other;
    atomic_int *go;
} reporter;

/* Heartbeats of FULL_REPORTS metric reports each, while *go is 1. */
static void *report_loop(void *arg)
{
    reporter *p = arg;
    while (atomic_load(p->go)) {
        json_t *body = json_pack("{s[]s[]s[]}", "running", "events", "metrics");
        json_t *run1 = json_pack("{sIsIsi}", "trial_id", (json_int_t)p->trial, "attempt", (json_int_t)p->attempt,
                                 "rank", 0);
        json_array_append_new(json_object_get(body, "running"), run1);
        json_t *mets = json_object_get(body, "metrics");
        for (int k = 0; k < FULL_REPORTS; k++) {
            p->step++;
            json_array_append_new(mets, json_pack("{sIsIsIs{sfsf}}", "trial_id", (json_int_t)p->trial, "attempt",
                                                  (json_int_t)p->attempt, "step", (json_int_t)p->step, "values",
                                                  "a_rather_long_metric_name_to_fill_pages_quickly", 0.5,
                                                  "another_long_metric_name_for_the_same_purpose", 0.25));
        }
        json_t *out = NULL;
        hf_jerr e;
        int rc = sched_agent_heartbeat(p->c, p->agent, body, &out, &e);
        if (rc == 0) p->acked += FULL_REPORTS;
        else if (rc == HF_ENOSPC) p->failed++;
        else p->other++;
        json_decref(out);
        json_decref(body);
    }
    return NULL;
}

static void run_phase(reporter *rp, atomic_int *go, int ms)
{
    pthread_t th[FULL_THREADS];
    atomic_store(go, 1);
    for (int i = 0; i < FULL_THREADS; i++) assert_int_equal(pthread_create(&th[i], NULL, report_loop, &rp[i]), 0);
    usleep((useconds_t)ms * 1000);
    atomic_store(go, 0);
    for (int i = 0; i < FULL_THREADS; i++) pthread_join(th[i], NULL);
}

static void test_failed_group_acknowledges_nothing(void **state)
{
    (void)state;
    char path[320];
    snprintf(path, sizeof path, "%s/full.db", dir);
    store *s = NULL;
    sched *c = NULL;
    sched_config cfg;
    sched_config_defaults(&cfg);
    cfg.max_metric_names = 8;
    unit_open_core(path, &cfg, &s, &c);
    static atomic_int go;
    reporter rp[FULL_THREADS];
    memset(rp, 0, sizeof rp);
    for (int i = 0; i < FULL_THREADS; i++) {
        char name[16];
        snprintf(name, sizeof name, "f%d", i);
        rp[i] = (reporter){.c = c, .agent = unit_register(c, name, 1), .go = &go};
    }
    unit_submit(c, "{\"name\": \"full\", \"objective\": {\"metric\": \"m\", \"goal\": \"maximize\"},"
                   "\"searcher\": {\"name\": \"random\", \"max_trials\": 8, \"seed\": 5},"
                   "\"hyperparameters\": {\"x\": {\"type\": \"uniform\", \"min\": 0, \"max\": 1}},"
                   "\"trial\": {\"command\": [\"true\"]}}");
    hf_jerr je;
    /* Each agent takes its trial and reports it started. */
    for (int i = 0; i < FULL_THREADS; i++) {
        json_t *b = json_pack("{s[]s[]s[]}", "running", "events", "metrics"), *out = NULL;
        assert_int_equal(sched_agent_heartbeat(c, rp[i].agent, b, &out, &je), 0);
        json_t *a = json_array_get(json_object_get(out, "assign"), 0);
        assert_non_null(a);
        rp[i].trial = json_integer_value(json_object_get(a, "trial_id"));
        rp[i].attempt = json_integer_value(json_object_get(a, "attempt"));
        json_decref(out);
        json_decref(b);
        b = json_pack("{s[]s[{sIsIsssIsI}]s[]}", "running", "events", "trial_id", (json_int_t)rp[i].trial, "attempt",
                      (json_int_t)rp[i].attempt, "type", "started", "time", (json_int_t)1, "pid", (json_int_t)100,
                      "metrics");
        assert_int_equal(sched_agent_heartbeat(c, rp[i].agent, b, &out, &je), 0);
        json_decref(out);
        json_decref(b);
    }
    run_phase(rp, &go, 300);   /* room to spare: everything is acknowledged */
    long acked1 = 0;
    for (int i = 0; i < FULL_THREADS; i++) {
        assert_int_equal(rp[i].failed + rp[i].other, 0);
        acked1 += rp[i].acked;
    }
    assert_true(acked1 > 0);

    /* Nearly full: 32 more pages, a few heartbeats' worth, then none (no
     * thread is inside the core while the limit is set). Repeated (at
     * most 5 times) until some heartbeats were deferred into a group in
     * that phase, which is the path under test. */
    sqlite3 *db = store_db(s);
    long acked2 = 0, failed2 = 0, other2 = 0;
    uint64_t grouped = 0;
    for (int round = 0; round < 5 && grouped == 0; round++) {
        int64_t pages = unit_one_int(db, "PRAGMA page_count");
        char sql[96];
        snprintf(sql, sizeof sql, "PRAGMA max_page_count=%lld", (long long)pages + 32);
        assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
        uint64_t g1 = atomic_load(&metrics.heartbeats_grouped);
        hf_log_set_level(HF_LOG_OFF);   /* hundreds of expected "disk is full" lines */
        run_phase(rp, &go, 500);
        hf_log_set_level(HF_LOG_WARN);
        grouped = atomic_load(&metrics.heartbeats_grouped) - g1;
    }
    for (int i = 0; i < FULL_THREADS; i++) {
        acked2 += rp[i].acked;
        failed2 += rp[i].failed;
        other2 += rp[i].other;
    }
    fprintf(stderr, "full store: %ld reports acked before, %ld heartbeats refused while full (%ld other), "
            "%llu heartbeats deferred into groups as it filled up\n", acked1, failed2, other2,
            (unsigned long long)grouped);
    assert_int_equal(other2, 0);
    assert_true(failed2 > 0);
    assert_true(grouped > 0);

    /* Space returns: heartbeats are acknowledged again. */
    assert_int_equal(sqlite3_exec(db, "PRAGMA max_page_count=1073741823", NULL, NULL, NULL), SQLITE_OK);
    for (int i = 0; i < FULL_THREADS; i++) rp[i].failed = 0;
    run_phase(rp, &go, 200);
    long acked = 0;
    for (int i = 0; i < FULL_THREADS; i++) {
        assert_int_equal(rp[i].failed + rp[i].other, 0);
        acked += rp[i].acked;
    }
    assert_true(acked > acked2);
    sched_free(c);
    store_close(s);
    /* Exactly what was acknowledged, each report's two values: nothing of
     * a refused heartbeat, nothing acknowledged missing. */
    assert_int_equal(one_int(path, "SELECT count(*) FROM metrics"), 2 * acked);
}

static void test_checkpointer_thread(void **state)
{
    (void)state;
    char path[320], err[256] = "", wal[340];
    snprintf(path, sizeof path, "%s/ckpt.db", dir);
    snprintf(wal, sizeof wal, "%s-wal", path);
    store *s = NULL;
    assert_int_equal(store_open(path, &s, err, sizeof err), 0);
    struct stat st0;
    assert_int_equal(stat(path, &st0), 0);
    sqlite3 *db = store_db(s);
    /* ~6 MiB of log rows in 300 commits: well past 1000 WAL pages. */
    char line[2048];
    memset(line, 'x', sizeof line - 1);
    line[sizeof line - 1] = 0;
    assert_int_equal(sqlite3_exec(db, "INSERT INTO experiments(name,state,config,max_trials,created_at) "
                                      "VALUES('c','ACTIVE','{}',1,0);"
                                      "INSERT INTO trials(experiment_id,idx,state,hparams,budget,created_at) "
                                      "VALUES(1,0,'QUEUED','{}',0,0)", NULL, NULL, NULL), SQLITE_OK);
    for (int k = 0; k < 300; k++) {
        assert_int_equal(store_begin(s), 0);
        for (int j = 0; j < 10; j++) {
            sqlite3_stmt *ins = store_stmt(s, ST_LOG_INSERT);
            sqlite3_bind_int64(ins, 1, 1);
            sqlite3_bind_int64(ins, 2, 1);
            sqlite3_bind_text(ins, 3, "stdout", -1, SQLITE_STATIC);
            sqlite3_bind_text(ins, 4, line, -1, SQLITE_STATIC);
            sqlite3_bind_int64(ins, 5, k);
            assert_int_equal(store_exec_stmt(ins), 0);
        }
        assert_int_equal(store_commit(s), 0);
    }
    int64_t runs = 0, fails = 0;
    for (int i = 0; i < 500 && runs == 0; i++) {
        store_checkpoint_stats(s, &runs, &fails);
        if (runs == 0) usleep(10000);
    }
    assert_true(runs > 0);
    assert_int_equal(fails, 0);
    /* The checkpoint copied frames into the database file. */
    struct stat st1;
    int grew = 0;
    for (int i = 0; i < 500 && !grew; i++) {
        assert_int_equal(stat(path, &st1), 0);
        grew = st1.st_size > st0.st_size + (1 << 20);
        if (!grew) usleep(10000);
    }
    assert_true(grew);
    store_close(s);
    assert_int_equal(access(wal, F_OK), -1);   /* closed cleanly: WAL folded in and removed */
    assert_int_equal(one_int(path, "SELECT count(*) FROM logs"), 3000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_concurrent_heartbeats_group_commit),
        cmocka_unit_test(test_failed_group_acknowledges_nothing),
        cmocka_unit_test(test_checkpointer_thread),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
