/*
 * test_scheduler_backup.c — online snapshots and their restore
 * (scheduler/store/backup.h; docs/operations.md, "Backup and restore").
 *
 *   - backup_check_dir, table-driven: relative paths, '.' and '..'
 *     components, a missing directory, the live database's own directory
 *     and the inside of the checkpoint store are refused; a directory
 *     elsewhere is accepted;
 *   - a snapshot taken while a thread keeps committing heartbeats of
 *     metrics through the real core: the copy passes integrity_check, its
 *     manifest's counts and SHA-256 are the copy's, its metrics are a
 *     prefix of what the live store ends with (a consistent point in
 *     time), every checkpoint object is there with its bytes;
 *   - a second snapshot links the objects the first holds and copies only
 *     the new one; keep=1 leaves one snapshot;
 *   - restore writes a database and store that open (store_open, core
 *     load) with the snapshot's rows and objects; it refuses an existing
 *     database, a database whose SHA-256 differs from the manifest's, and
 *     an object whose bytes differ from its name;
 *   - a live object whose bytes do not match its name fails the backup;
 *   - the backup service: a request is refused at once for a bad
 *     directory, else queued and run on the service's thread (queued ->
 *     done, with the snapshot's path; an interrupted snapshot's folder
 *     is removed); a scheduled service takes a
 *     snapshot every second and keeps 2.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "hf_err.h"
#include "hf_log.h"
#include "scheduler/core/sched.h"
#include "scheduler/store/backup.h"
#include "scheduler/store/ckstore.h"
#include "scheduler/store/store.h"
#include "hf_sha256.h"
#include "tests/unit/ckpt_fixture.h"
#include "tests/unit/unit_fixture.h"

#include <dirent.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[256];

static int setup(void **st) { (void)st; return unit_tmpdir(dir, sizeof dir, "backup"); }
static int teardown(void **st) { (void)st; return unit_rmtree(dir); }

static int64_t one_int(const char *path, const char *sql)
{
    sqlite3 *db = NULL;
    int64_t v = -1;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK) v = unit_one_int(db, sql);
    sqlite3_close(db);
    return v;
}

static void test_check_dir(void **state)
{
    (void)state;
    char live[320], db[340], ck[340], other[320], inside[360], buf[8][400], err[256];
    snprintf(live, sizeof live, "%s/live", dir);
    snprintf(db, sizeof db, "%s/h.db", live);
    snprintf(ck, sizeof ck, "%s/h.db.checkpoints", live);
    snprintf(other, sizeof other, "%s/backups", dir);
    snprintf(inside, sizeof inside, "%s/objects", ck);
    assert_int_equal(mkdir(live, 0755), 0);
    assert_int_equal(mkdir(ck, 0755), 0);
    assert_int_equal(mkdir(inside, 0755), 0);
    assert_int_equal(mkdir(other, 0755), 0);
    snprintf(buf[0], sizeof buf[0], "%s/../backups", live);
    snprintf(buf[1], sizeof buf[1], "%s/./x", dir);
    snprintf(buf[2], sizeof buf[2], "%s/nope", dir);
    snprintf(buf[3], sizeof buf[3], "%s/", live);
    const struct { const char *d; int rc; } cases[] = {
        {"backups", HF_EINVAL},  {buf[0], HF_EINVAL},   {buf[1], HF_EINVAL}, {buf[2], HF_ENOTFOUND},
        {live, HF_EINVAL},       {buf[3], HF_EINVAL},   {ck, HF_EINVAL},     {inside, HF_EINVAL},
        {other, 0},              {"", HF_EINVAL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = backup_check_dir(cases[i].d, db, ck, err, sizeof err);
        if (rc != cases[i].rc) fail_msg("backup_check_dir(%s): %d (%s), expected %d", cases[i].d, rc, err, cases[i].rc);
    }
}

typedef struct writer {
    sched *c;
    int64_t agent, trial, attempt;
    atomic_int go;
    long acked;
} writer;

/* Heartbeats of 20 metric reports each while go. */
static void *write_loop(void *arg)
{
    writer *w = arg;
    hf_jerr je;
    for (int step = 0; atomic_load(&w->go); step++) {
        json_t *b = json_pack("{s[{sIsIsi}]s[]s[]}", "running", "trial_id", (json_int_t)w->trial, "attempt",
                              (json_int_t)w->attempt, "rank", 0, "events", "metrics"), *out = NULL;
        for (int k = 0; k < 20; k++)
            json_array_append_new(json_object_get(b, "metrics"),
                                  json_pack("{sIsIsIs{sf}}", "trial_id", (json_int_t)w->trial, "attempt",
                                            (json_int_t)w->attempt, "step", (json_int_t)(step * 20 + k), "values",
                                            "m", 0.5));
        if (sched_agent_heartbeat(w->c, w->agent, b, &out, &je) == 0) w->acked += 20;
        json_decref(out);
        json_decref(b);
    }
    return NULL;
}

/* An agent with one started trial of a new experiment. */
static void start_trial(sched *c, writer *w)
{
    hf_jerr je;
    w->c = c;
    w->agent = unit_register(c, "bk", 1);
    unit_submit(c, "{\"name\": \"bk\", \"objective\": {\"metric\": \"m\", \"goal\": \"maximize\"},"
                   "\"searcher\": {\"name\": \"random\", \"max_trials\": 1, \"seed\": 1},"
                   "\"hyperparameters\": {\"x\": {\"type\": \"uniform\", \"min\": 0, \"max\": 1}},"
                   "\"trial\": {\"command\": [\"true\"]}}");
    json_t *b = json_pack("{s[]s[]s[]}", "running", "events", "metrics"), *out = NULL;
    assert_int_equal(sched_agent_heartbeat(c, w->agent, b, &out, &je), 0);
    json_t *a = json_array_get(json_object_get(out, "assign"), 0);
    w->trial = json_integer_value(json_object_get(a, "trial_id"));
    w->attempt = json_integer_value(json_object_get(a, "attempt"));
    json_decref(out);
    json_decref(b);
    b = json_pack("{s[]s[{sIsIsssIsI}]s[]}", "running", "events", "trial_id", (json_int_t)w->trial, "attempt",
                  (json_int_t)w->attempt, "type", "started", "time", (json_int_t)1, "pid", (json_int_t)9, "metrics");
    assert_int_equal(sched_agent_heartbeat(c, w->agent, b, &out, &je), 0);
    json_decref(out);
    json_decref(b);
}

static int count_entries(const char *path)
{
    DIR *d = opendir(path);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) n += e->d_name[0] != '.';
    if (d) closedir(d);
    return n;
}

static void flip_byte(const char *path, long off)
{
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    fseek(f, off, SEEK_SET);
    int ch = fgetc(f);
    fseek(f, off, SEEK_SET);
    fputc(ch ^ 0x55, f);
    fclose(f);
}

/* Damaged snapshots are not restored; a damaged live object fails a backup.
 * snap: a snapshot of db holding objects sha1 and sha2. */
static void check_refusals(const char *db, ckstore *ck, const char *ckdir, const char *snap, const char *sha1,
                           const char *sha2)
{
    char path[4400], err[512], rdb2[320], rck[320];
    backup_result r1;
    snprintf(rck, sizeof rck, "%s/restored.ck", dir);
    /* A damaged object, then a damaged database, are refused. */
    snprintf(rdb2, sizeof rdb2, "%s/restored2.db", dir);
    snprintf(path, sizeof path, "%s/objects/%.2s/%s", snap, sha2, sha2);
    flip_byte(path, 0);
    assert_int_equal(backup_restore(snap, rdb2, rck, err, sizeof err), HF_ECORRUPT);
    flip_byte(path, 0);
    snprintf(path, sizeof path, "%s/" BACKUP_DB_FILE, snap);
    flip_byte(path, 5000);
    assert_int_equal(backup_restore(snap, rdb2, rck, err, sizeof err), HF_ECORRUPT);
    struct stat sb;
    assert_int_not_equal(stat(rdb2, &sb), 0);   /* nothing written */

    /* A live object whose bytes are not its name fails the backup. */
    snprintf(path, sizeof path, "%s/objects/%.2s/%s", ckdir, sha1, sha1);
    flip_byte(path, 1);
    char bdir2[330];   /* a directory of no earlier snapshot: the object is copied, not linked */
    snprintf(bdir2, sizeof bdir2, "%s/backups2", dir);
    assert_int_equal(mkdir(bdir2, 0755), 0);
    hf_log_set_level(HF_LOG_OFF);
    assert_int_equal(backup_take(db, ck, bdir2, 0, 0, &r1, err, sizeof err), HF_ECORRUPT);
    hf_log_set_level(HF_LOG_WARN);
    assert_int_equal(count_entries(bdir2), 0);   /* no partial snapshot left */
}

static void test_snapshot_restore(void **state)
{
    (void)state;
    char db[320], ckdir[320], bdir[320], err[512], sha[3][65], path[4400], rdb[320], rck[320];
    snprintf(db, sizeof db, "%s/live.db", dir);
    snprintf(ckdir, sizeof ckdir, "%s/live.ck", dir);
    snprintf(bdir, sizeof bdir, "%s/backups", dir);
    assert_int_equal(mkdir(bdir, 0755), 0);
    store *s = NULL;
    sched *c = NULL;
    ckstore *ck = NULL;
    unit_open_core(db, NULL, &s, &c);
    assert_int_equal(ckstore_open(ckdir, db, 1 << 20, &ck, err, sizeof err), 0);
    static writer w;
    start_trial(c, &w);
    unit_put_ckpt(ck, w.trial, 1, w.attempt, "a.pt", "first checkpoint", sha[0]);
    unit_put_ckpt(ck, w.trial, 2, w.attempt, "b.pt", "second checkpoint", sha[1]);

    /* Snapshot 1 while heartbeats commit. */
    pthread_t th;
    atomic_store(&w.go, 1);
    assert_int_equal(pthread_create(&th, NULL, write_loop, &w), 0);
    usleep(100000);
    backup_result r1, r2;
    assert_int_equal(backup_take(db, ck, bdir, 0, 4, &r1, err, sizeof err), 0);   /* 4 pages a slice: many slices */
    usleep(50000);
    atomic_store(&w.go, 0);
    pthread_join(th, NULL);
    assert_true(w.acked > 0);
    assert_int_equal(r1.objects, 2);
    assert_int_equal(r1.objects_copied, 2);
    snprintf(path, sizeof path, "%s/" BACKUP_DB_FILE, r1.snapshot);
    int64_t snap_metrics = one_int(path, "SELECT count(*) FROM metrics");
    assert_true(snap_metrics > 0);
    assert_true(snap_metrics <= w.acked);
    /* a point in time: the snapshot's metrics are the live store's first ones */
    assert_int_equal(one_int(path, "SELECT max(seq) FROM metrics"), snap_metrics + one_int(db, "SELECT min(seq)-1 FROM metrics"));
    snprintf(path, sizeof path, "%s/" BACKUP_MANIFEST, r1.snapshot);
    json_t *man = json_load_file(path, 0, NULL);
    assert_non_null(man);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(man, "counts"), "metrics")), snap_metrics);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(man, "counts"), "checkpoints")), 2);
    assert_int_equal(json_integer_value(json_object_get(man, "schema_version")), store_version(s));
    json_decref(man);

    /* Snapshot 2: one new object copied, two linked; keep 1. */
    unit_put_ckpt(ck, w.trial, 3, w.attempt, "c.pt", "third checkpoint", sha[2]);
    usleep(2000);
    assert_int_equal(backup_take(db, ck, bdir, 1, 0, &r2, err, sizeof err), 0);
    assert_int_equal(r2.objects, 3);
    assert_int_equal(r2.objects_copied, 1);
    assert_int_equal(r2.objects_linked, 2);
    assert_int_equal(count_entries(bdir), 1);

    /* Restore snapshot 2 elsewhere: it opens, with the rows and objects. */
    snprintf(rdb, sizeof rdb, "%s/restored.db", dir);
    snprintf(rck, sizeof rck, "%s/restored.ck", dir);
    assert_int_equal(backup_restore(r2.snapshot, rdb, rck, err, sizeof err), 0);
    assert_int_equal(one_int(rdb, "SELECT count(*) FROM checkpoints"), 3);
    /* ids the lost server may have handed out after the snapshot are not
     * handed out again: the floors are 1,000,000 above the snapshot's */
    assert_int_equal(one_int(rdb, "SELECT id FROM id_floor WHERE name='trials'"),
                     one_int(rdb, "SELECT max(id) FROM trials") + 1000000);
    assert_int_equal(one_int(rdb, "SELECT id FROM id_floor WHERE name='experiments'"),
                     one_int(rdb, "SELECT max(id) FROM experiments") + 1000000);
    snprintf(path, sizeof path, "%s.restoring", rdb);
    assert_int_equal(access(path, F_OK), -1);   /* the temp copy is gone */
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/objects/%.2s/%s", rck, sha[i], sha[i]);
        int fd = open(path, O_RDONLY);
        char got[65];
        int64_t n;
        assert_true(fd >= 0);
        assert_int_equal(hf_sha256_fd(fd, -1, got, &n), 0);
        close(fd);
        assert_string_equal(got, sha[i]);
    }
    store *s2 = NULL;
    sched *c2 = NULL;
    unit_open_core(rdb, NULL, &s2, &c2);
    json_t *t = NULL;
    assert_int_equal(sched_trial_get(c2, w.trial, &t), 0);
    json_decref(t);
    /* the next experiment the restored scheduler creates is above the gap */
    int64_t x2 = unit_submit(c2, "{\"name\": \"gap\", \"objective\": {\"metric\": \"m\", \"goal\": \"maximize\"},"
                                 "\"searcher\": {\"name\": \"random\", \"max_trials\": 1, \"seed\": 1},"
                                 "\"hyperparameters\": {\"x\": {\"type\": \"uniform\", \"min\": 0, \"max\": 1}},"
                                 "\"trial\": {\"command\": [\"true\"]}}");
    if (x2 <= 1000000) fail_msg("experiment %lld created after the restore is below the id gap", (long long)x2);
    sched_free(c2);
    store_close(s2);
    assert_int_equal(backup_restore(r2.snapshot, rdb, rck, err, sizeof err), HF_EEXIST);

    check_refusals(db, ck, ckdir, r2.snapshot, sha[1], sha[2]);
    ckstore_close(ck);
    sched_free(c);
    store_close(s);
}

/* Poll backup_job_json until id is done or failed (10 s at most). */
static json_t *wait_job(int64_t id)
{
    json_t *j = NULL;
    for (int i = 0; i < 1000; i++) {
        json_decref(j);
        assert_int_equal(backup_job_json(id, &j), 0);
        const char *st = json_string_value(json_object_get(j, "state"));
        if (!strcmp(st, "done") || !strcmp(st, "failed")) return j;
        usleep(10000);
    }
    fail_msg("backup %lld did not end in 10 s", (long long)id);
    return NULL;
}

static void test_service(void **state)
{
    (void)state;
    char db[320], ckdir[320], bdir[320], sdir[320], err[512];
    snprintf(db, sizeof db, "%s/svc.db", dir);
    snprintf(ckdir, sizeof ckdir, "%s/svc.ck", dir);
    snprintf(bdir, sizeof bdir, "%s/req", dir);
    snprintf(sdir, sizeof sdir, "%s/sched", dir);
    assert_int_equal(mkdir(bdir, 0755), 0);
    assert_int_equal(mkdir(sdir, 0755), 0);
    store *s = NULL;
    sched *c = NULL;
    ckstore *ck = NULL;
    int64_t id = 0;
    json_t *j = NULL;
    unit_open_core(db, NULL, &s, &c);
    assert_int_equal(ckstore_open(ckdir, db, 1 << 20, &ck, err, sizeof err), 0);
    assert_int_equal(backup_request(bdir, "admin", &id, err, sizeof err), HF_EUNSUP);   /* no service yet */
    assert_int_equal(backup_service_start(db, ck, NULL, 0, 1), 0);
    assert_int_equal(backup_service_start(db, ck, NULL, 0, 1), HF_ESTATE);
    assert_int_equal(backup_request("rel/dir", "admin", &id, err, sizeof err), HF_EINVAL);
    assert_int_equal(backup_request(dir, "admin", &id, err, sizeof err), HF_EINVAL);   /* the database's own folder */
    char partial[400];
    snprintf(partial, sizeof partial, "%s/.tmp-hf-20200101T000000000Z", bdir);   /* a crash's leftover */
    assert_int_equal(mkdir(partial, 0755), 0);
    assert_int_equal(backup_request(bdir, "admin", &id, err, sizeof err), 0);
    assert_true(id >= 1);
    j = wait_job(id);
    assert_string_equal(json_string_value(json_object_get(j, "state")), "done");
    assert_string_equal(json_string_value(json_object_get(j, "user")), "admin");
    const char *snap = json_string_value(json_object_get(j, "snapshot"));
    assert_non_null(snap);
    assert_int_equal(strncmp(snap, bdir, strlen(bdir)), 0);
    json_decref(j);
    struct stat sb;
    assert_int_not_equal(stat(partial, &sb), 0);   /* removed by the next backup */
    assert_int_equal(backup_job_json(id + 100, &j), HF_ENOTFOUND);
    backup_service_stop();

    assert_int_equal(backup_service_start(db, ck, sdir, 1, 2), 0);
    usleep(3600000);
    backup_service_stop();
    assert_int_equal(count_entries(sdir), 2);
    ckstore_close(ck);
    sched_free(c);
    store_close(s);
}

int main(void)
{
    hf_log_set_level(HF_LOG_WARN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_check_dir, setup, teardown),
        cmocka_unit_test_setup_teardown(test_snapshot_restore, setup, teardown),
        cmocka_unit_test_setup_teardown(test_service, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
