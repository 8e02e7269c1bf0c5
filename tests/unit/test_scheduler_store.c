/*
 * test_scheduler_store.c — the SQLite store on a real temporary file:
 * migrations applied once (user_version), WAL and foreign keys on,
 * prepared statements work, rows survive close and reopen, a failed
 * transaction leaves nothing behind, store_health answers /healthz's
 * question; and the core (sched) reloads experiments and trials from the
 * same file after a "restart".
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "hf_err.h"
#include "hf_log.h"
#include "scheduler/core/sched.h"
#include "scheduler/store/store.h"
#include "tests/unit/unit_fixture.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[256], path[300];

static int setup(void **st)
{
    (void)st;
    if (unit_tmpdir(dir, sizeof dir, "store")) return -1;
    snprintf(path, sizeof path, "%s/t.db", dir);
    return 0;
}

static int teardown(void **st) { (void)st; return unit_rmtree(dir); }

#define one_int unit_one_int

static void test_migrate_and_reopen(void **state)
{
    (void)state;
    char err[256] = "";
    store *s = NULL;
    assert_int_equal(store_open(path, &s, err, sizeof err), 0);
    int newest = 0;
    for (const store_migration *m = store_migrations; m->sql; m++) newest = m->version;
    assert_true(newest >= 1);
    assert_int_equal(store_version(s), newest);
    sqlite3 *db = store_db(s);
    assert_int_equal(one_int(db, "PRAGMA foreign_keys"), 1);
    sqlite3_stmt *jm = NULL;
    assert_int_equal(sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &jm, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(jm), SQLITE_ROW);
    assert_string_equal((const char *)sqlite3_column_text(jm, 0), "wal");
    sqlite3_finalize(jm);

    /* Insert through the prepared statements in one transaction. */
    assert_int_equal(store_begin(s), 0);
    sqlite3_stmt *st = store_stmt(s, ST_EXP_INSERT);
    sqlite3_bind_text(st, 1, "e1", -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, "ACTIVE", -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, "{}", -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 4, 5);
    sqlite3_bind_int64(st, 5, 1000);
    assert_int_equal(store_exec_stmt(st), 0);
    assert_int_equal(store_commit(s), 0);

    /* A foreign key violation fails and the rollback leaves nothing. */
    assert_int_equal(store_begin(s), 0);
    st = store_stmt(s, ST_TRIAL_INSERT);
    sqlite3_bind_int64(st, 1, 999);     /* no such experiment */
    sqlite3_bind_int64(st, 2, 0);
    sqlite3_bind_text(st, 3, "QUEUED", -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, "{}", -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 5, 0);
    sqlite3_bind_null(st, 6);
    sqlite3_bind_int64(st, 7, 1);
    assert_int_not_equal(store_exec_stmt(st), 0);
    assert_int_equal(store_rollback(s), 0);
    assert_int_equal(one_int(db, "SELECT count(*) FROM trials"), 0);
    store_close(s);

    /* Reopen: the migration is not applied twice and the row is there. */
    s = NULL;
    assert_int_equal(store_open(path, &s, err, sizeof err), 0);
    assert_int_equal(store_version(s), newest);
    assert_int_equal(one_int(store_db(s), "SELECT count(*) FROM experiments WHERE name='e1'"), 1);
    /* A reader connection sees committed rows. */
    sqlite3 *r = store_reader_get(s);
    assert_non_null(r);
    assert_int_equal(one_int(r, "SELECT max_trials FROM experiments"), 5);
    store_reader_put(s, r);
    store_close(s);
}

static void test_newer_schema_refused(void **state)
{
    (void)state;
    char p2[320], err[256] = "";
    snprintf(p2, sizeof p2, "%s/newer.db", dir);
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(p2, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "PRAGMA user_version=9999", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    store *s = NULL;
    assert_int_not_equal(store_open(p2, &s, err, sizeof err), 0);
    assert_null(s);
    assert_non_null(strstr(err, "newer"));
}

static void test_rc_mapping(void **state)
{
    (void)state;
    assert_int_equal(store_rc(SQLITE_FULL), HF_ENOSPC);
    assert_int_equal(store_rc(SQLITE_OK), 0);
    assert_int_equal(store_rc(SQLITE_IOERR_WRITE), HF_EDB);
}

/* /healthz's question: a reader can read the experiments table. */
static void test_health(void **state)
{
    (void)state;
    char p2[320], err[256];
    store *s = NULL;
    snprintf(p2, sizeof p2, "%s/health.db", dir);
    assert_int_equal(store_open(p2, &s, err, sizeof err), 0);
    assert_int_equal(store_health(s), 0);
    assert_int_equal(sqlite3_exec(store_db(s), "PRAGMA foreign_keys=OFF; DROP TABLE experiments", NULL, NULL, NULL),
                     SQLITE_OK);
    assert_int_equal(store_health(s), HF_EDB);
    store_close(s);
}

/* store_version is asked from HTTP threads (GET /replication, every
 * standby stream request) while the core commits on the writer: it must
 * not touch the writer connection (opened SQLITE_OPEN_NOMUTEX, so two
 * threads on it corrupt its heap; a primary crashed so under a streaming
 * standby). Readers ask it throughout a thousand commits. */
static _Atomic int version_stop;
static store *version_store;

static void *version_reader(void *arg)
{
    long *bad = arg;
    int want = store_schema_newest();
    while (!atomic_load(&version_stop))
        if (store_version(version_store) != want) (*bad)++;
    return NULL;
}

static void test_version_while_writing(void **state)
{
    (void)state;
    char p2[320], err[256];
    snprintf(p2, sizeof p2, "%s/version.db", dir);
    assert_int_equal(store_open(p2, &version_store, err, sizeof err), 0);
    assert_int_equal(store_version(version_store), store_schema_newest());
    assert_int_equal(sqlite3_exec(store_db(version_store), "CREATE TABLE t(x INTEGER, y TEXT)", NULL, NULL, NULL),
                     SQLITE_OK);
    pthread_t th[2];
    long bad[2] = {0, 0};
    atomic_store(&version_stop, 0);
    for (int i = 0; i < 2; i++) assert_int_equal(pthread_create(&th[i], NULL, version_reader, &bad[i]), 0);
    for (int i = 0; i < 1000; i++) {
        assert_int_equal(store_begin(version_store), 0);
        char sql[160];
        snprintf(sql, sizeof sql, "INSERT INTO t VALUES (%d, printf('%%.*c', %d, 'x'))", i, 1 + i % 300);
        assert_int_equal(sqlite3_exec(store_db(version_store), sql, NULL, NULL, NULL), SQLITE_OK);
        assert_int_equal(store_commit(version_store), 0);
    }
    atomic_store(&version_stop, 1);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    assert_int_equal(bad[0] + bad[1], 0);
    assert_int_equal(one_int(store_db(version_store), "SELECT count(*) FROM t"), 1000);
    store_close(version_store);
    version_store = NULL;
}

static const char *exp_json =
    "{\"name\":\"restart\",\"objective\":{\"metric\":\"val_acc\",\"goal\":\"maximize\"},"
    "\"searcher\":{\"name\":\"random\",\"max_trials\":4,\"max_concurrent_trials\":4,\"seed\":7},"
    "\"hyperparameters\":{\"lr\":{\"type\":\"log\",\"min\":0.001,\"max\":0.1}},"
    "\"trial\":{\"command\":[\"true\"]}}";

/* The core persists what it acknowledges and reloads it after a restart. */
static void test_core_reload(void **state)
{
    (void)state;
    char p3[320];
    snprintf(p3, sizeof p3, "%s/core.db", dir);
    store *s = NULL;
    sched *c = NULL;
    unit_open_core(p3, NULL, &s, &c);
    int64_t id = unit_submit(c, exp_json);
    assert_true(id > 0);
    unit_register(c, "a1", 2);
    json_t *out = NULL;
    assert_int_equal(sched_experiment_trials(c, id, &out), 0);
    size_t ntr = json_array_size(json_object_get(out, "trials"));
    assert_int_equal(ntr, 2);   /* 2 slots: only what can be placed is created */
    json_decref(out);
    sched_free(c);
    store_close(s);

    unit_open_core(p3, NULL, &s, &c);
    assert_int_equal(sched_experiment_trials(c, id, &out), 0);
    json_t *trials = json_object_get(out, "trials");
    assert_int_equal(json_array_size(trials), ntr);
    assert_string_equal(json_string_value(json_object_get(json_array_get(trials, 0), "state")), "ASSIGNED");
    json_decref(out);
    assert_int_equal(sched_agent_list(c, &out), 0);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(json_object_get(out, "agents"), 0), "slots_used")), 2);
    json_decref(out);
    assert_int_equal(sched_experiment_get(c, 999, &out), HF_ENOTFOUND);
    sched_free(c);
    store_close(s);
}

/* An assignment sent before a restart but not yet reported started is
 * still waited for after it: the first ticks must not fail it as "not
 * acknowledged" (its send time is not stored; the timeout restarts). */
static void test_sent_assignment_survives_restart(void **state)
{
    (void)state;
    char p3[320];
    snprintf(p3, sizeof p3, "%s/sent.db", dir);
    store *s = NULL;
    sched *c = NULL;
    unit_open_core(p3, NULL, &s, &c);
    int64_t id = unit_submit(c, exp_json);
    int64_t a1 = unit_register(c, "a1", 1);
    json_t *b = json_pack("{s[]s[]s[]}", "running", "events", "metrics"), *out = NULL;
    hf_jerr je;
    assert_int_equal(sched_agent_heartbeat(c, a1, b, &out, &je), 0);   /* the assignment goes out */
    assert_int_equal(json_array_size(json_object_get(out, "assign")), 1);
    json_decref(out);
    json_decref(b);
    sched_free(c);
    store_close(s);

    unit_open_core(p3, NULL, &s, &c);
    sched_tick(c);
    sched_tick(c);
    assert_int_equal(sched_experiment_trials(c, id, &out), 0);
    json_t *t0 = json_array_get(json_object_get(out, "trials"), 0);
    assert_string_equal(json_string_value(json_object_get(t0, "state")), "ASSIGNED");
    json_decref(out);
    sched_free(c);
    store_close(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_migrate_and_reopen),
        cmocka_unit_test(test_newer_schema_refused),
        cmocka_unit_test(test_rc_mapping),
        cmocka_unit_test(test_health),
        cmocka_unit_test(test_version_while_writing),
        cmocka_unit_test(test_core_reload),
        cmocka_unit_test(test_sent_assignment_survives_restart),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
