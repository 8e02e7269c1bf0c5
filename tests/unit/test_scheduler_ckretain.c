/*
 * test_scheduler_ckretain.c — checkpoint retention (scheduler/store/ckretain.c):
 * the decision alone, table-driven; then the same rules end to end on a
 * real migrated SQLite file and a real checkpoint store (objects uploaded
 * through ckstore.c): after a pass only the policy's rows remain and
 * exactly the objects they name are on disk; an object shared by a kept
 * and a dropped row stays; an archived experiment keeps nothing; the
 * start-up GC removes old unnamed objects only; an upload whose object was
 * collected before its row is refused; usage figures count shared
 * objects once.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "thread_fixture.h"

#include "hf_err.h"
#include "hf_time.h"
#include "scheduler/store/ckretain.h"
#include "scheduler/store/ckstore.h"
#include "scheduler/store/store.h"
#include "tests/unit/ckpt_fixture.h"
#include "tests/unit/unit_fixture.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---------- the decision ---------- */

#define MAXT 6
#define MAXC 16

typedef struct dcase {
    const char     *name;
    ckretain_policy pol;
    int             archived;
    size_t          ntr;
    ckr_trial       tr[MAXT];
    const char     *steps[MAXT];   /* per trial: its checkpoints' steps, oldest first ("1,2,3") */
    const char     *want[MAXT];    /* per trial: the steps kept */
} dcase;

#define ENDED(id_, obj_, best_)  {.id = id_, .ended = 1, .has_obj = 1, .norm = obj_, .best_step = best_}
#define NOOBJ(id_)               {.id = id_, .ended = 1, .best_step = -1}
#define LIVE(id_)                {.id = id_, .ended = 0, .best_step = -1}
#define NEEDED(id_)              {.id = id_, .ended = 1, .needed = 1, .best_step = -1}

static const dcase dcases[] = {
    {"defaults: newest of each ended trial", {1, 1}, 0, 2, {ENDED(1, 0.5, -1), ENDED(2, 0.9, -1)},
     {"1,2,3", "1,2"}, {"3", "2"}},
    {"keep_latest 0, best 1 at its best step; every trial its scoring one", {0, 1}, 0, 2,
     {ENDED(1, 0.5, 2), ENDED(2, 0.9, 1)}, {"1,2,3", "1,2"}, {"2", "1"}},
    {"keep nothing by policy: the scoring checkpoints stay", {0, 0}, 0, 3,
     {ENDED(1, 0.5, 3), ENDED(2, 0.9, 1), NOOBJ(3)}, {"1,2,3", "1,2", "1,2"}, {"3", "1", ""}},
    {"scoring step without a checkpoint, not among the best: nothing", {0, 0}, 0, 1, {ENDED(1, 0.5, 7)},
     {"5,10"}, {""}},
    {"best step without a checkpoint: its newest", {0, 1}, 0, 1, {ENDED(1, 0.5, 7)}, {"5,10"}, {"10"}},
    {"best 2 of 3 (ties: older trial)", {0, 2}, 0, 3, {ENDED(1, 0.7, -1), ENDED(2, 0.7, -1), ENDED(3, 0.9, -1)},
     {"1,2", "1,2", "1,2"}, {"2", "", "2"}},
    {"keep_latest 2", {2, 0}, 0, 1, {ENDED(1, 0.1, -1)}, {"1,2,3,4"}, {"3,4"}},
    {"running and paused trials keep everything", {0, 0}, 0, 2, {LIVE(1), ENDED(2, 0.3, -1)},
     {"1,2,3", "1,2"}, {"1,2,3", ""}},
    {"a trial that may be continued keeps its newest", {0, 0}, 0, 2, {NEEDED(1), NOOBJ(2)}, {"1,2", "1,2"},
     {"2", ""}},
    {"no objective: never among the best", {0, 1}, 0, 2, {NOOBJ(1), ENDED(2, -5.0, -1)}, {"1", "1"}, {"", "1"}},
    {"best and latest overlap", {1, 1}, 0, 1, {ENDED(1, 1.0, 1)}, {"1,2,3"}, {"1,3"}},
    {"archived keeps nothing", {5, 5}, 1, 2, {ENDED(1, 1.0, -1), LIVE(2)}, {"1,2", "1"}, {"", ""}},
    {"keep more than exist", {10, 10}, 0, 1, {ENDED(1, 1.0, -1)}, {"1,2"}, {"1,2"}},
};

static size_t parse_steps(const char *s, int64_t *out)
{
    size_t n = 0;
    while (s && *s) {
        out[n++] = strtoll(s, (char **)&s, 10);
        if (*s == ',') s++;
    }
    return n;
}

static void test_decide_table(void **state)
{
    (void)state;
    for (size_t c = 0; c < sizeof dcases / sizeof dcases[0]; c++) {
        const dcase *d = &dcases[c];
        ckr_ckpt ck[MAXC];
        size_t n = 0;
        for (size_t t = 0; t < d->ntr; t++) {
            int64_t steps[MAXC];
            size_t k = parse_steps(d->steps[t], steps);
            for (size_t j = 0; j < k; j++)
                ck[n++] = (ckr_ckpt){.trial = t, .row_id = (int64_t)(100 * t + j), .step = steps[j], .keep = -1};
        }
        ckretain_decide(&d->pol, d->archived, d->tr, d->ntr, ck, n);
        for (size_t t = 0; t < d->ntr; t++) {
            char got[128] = "";
            for (size_t j = 0; j < n; j++) {
                if (ck[j].keep != 0 && ck[j].keep != 1) fail_msg("%s: keep not decided", d->name);
                if (ck[j].trial == t && ck[j].keep)
                    snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", got[0] ? "," : "",
                             (long long)ck[j].step);
            }
            if (strcmp(got, d->want[t])) fail_msg("%s: trial %zu kept \"%s\", expected \"%s\"", d->name, t, got, d->want[t]);
        }
    }
}

/* ---------- on a real database and store ---------- */

static char dir[256], ckdir[512], dbpath[512];

static int setup(void **state)
{
    (void)state;
    if (unit_tmpdir(dir, sizeof dir, "ckretain")) return -1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    return unit_rmtree(dir);
}

typedef struct env {
    store    *st;
    ckstore  *ck;
    ckretain *cr;
} env;

static void env_open(env *e, const char *name)
{
    char err[256] = "";
    char path[300];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    mkdir(path, 0755);
    snprintf(dbpath, sizeof dbpath, "%s/t.db", path);
    snprintf(ckdir, sizeof ckdir, "%s/store", path);
    if (store_open(dbpath, &e->st, err, sizeof err)) fail_msg("store_open: %s", err);
    if (ckstore_open(ckdir, dbpath, 1 << 20, &e->ck, err, sizeof err)) fail_msg("ckstore_open: %s", err);
    if (ckretain_open(e->ck, dbpath, 1000, 3600000, &e->cr, err, sizeof err)) fail_msg("ckretain_open: %s", err);
}

static void env_close(env *e)
{
    ckretain_close(e->cr);
    ckstore_close(e->ck);
    store_close(e->st);
}

static void sql(env *e, const char *fmt, ...)
{
    char q[4096];
    char *msg = NULL;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(q, sizeof q, fmt, ap);
    va_end(ap);
    if (sqlite3_exec(store_db(e->st), q, NULL, NULL, &msg) != SQLITE_OK) fail_msg("%s: %s", q, msg);
}

/* Upload content as a checkpoint of trial tid at step. */
static void put_ckpt(env *e, int64_t tid, int64_t step, const char *content, char sha[65])
{
    unit_put_ckpt(e->ck, tid, step, 0, NULL, content, sha);
}

static int object_exists(const char *sha)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/objects/%.2s/%s", ckdir, sha, sha);
    return access(p, F_OK) == 0;
}

static int64_t count_objects(void)
{
    char p[1024];
    int64_t n = 0;
    snprintf(p, sizeof p, "%s/objects", ckdir);
    DIR *top = opendir(p);
    struct dirent *a;
    while (top && (a = readdir(top)) != NULL) {
        if (a->d_name[0] == '.') continue;
        char q[2048];
        snprintf(q, sizeof q, "%s/%s", p, a->d_name);
        DIR *sub = opendir(q);
        struct dirent *o;
        while (sub && (o = readdir(sub)) != NULL) n += o->d_name[0] != '.';
        if (sub) closedir(sub);
    }
    if (top) closedir(top);
    return n;
}

/* The first column of sql's first row as a malloc'ed string (NULL: none). */
static char *one_text(sqlite3 *db, const char *q)
{
    sqlite3_stmt *st = NULL;
    char *out = NULL;
    if (sqlite3_prepare_v2(db, q, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW &&
        sqlite3_column_text(st, 0))
        out = strdup((const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    if (!out) fail_msg("%s: no text", q);
    return out;
}

/* The kept steps of trial tid, "1,3". */
static void kept_steps(env *e, int64_t tid, char *out, size_t len)
{
    sqlite3_stmt *st = NULL;
    out[0] = 0;
    sqlite3_prepare_v2(store_db(e->st), "SELECT step FROM checkpoints WHERE trial_id=? AND state='stored' ORDER BY step",
                       -1, &st, NULL);
    sqlite3_bind_int64(st, 1, tid);
    while (sqlite3_step(st) == SQLITE_ROW)
        snprintf(out + strlen(out), len - strlen(out), "%s%lld", out[0] ? "," : "", sqlite3_column_int64(st, 0));
    sqlite3_finalize(st);
}

#define CFG(pol, srch) "{\"name\":\"e\",\"objective\":{\"metric\":\"acc\",\"goal\":\"maximize\"}," \
                       "\"searcher\":{\"name\":\"" srch "\"}" pol "}"

typedef struct dbtrial {
    const char *state;
    const char *objective;   /* SQL literal */
    int64_t     parent;      /* trial id (ids are 1..), 0 none */
    const char *metrics;     /* "step:value,..." of "acc" */
    const char *steps;       /* checkpoints, in upload order */
    const char *want;
} dbtrial;

typedef struct dbcase {
    const char *name, *config, *exp_state;
    int         archived;
    dbtrial     tr[MAXT];
} dbcase;

static const dbcase dbcases[] = {
    {"defaults: each trial's newest, the best trial's best step", CFG("", "random"), "COMPLETED", 0,
     {{"COMPLETED", "0.5", 0, "1:0.2,2:0.5,3:0.4", "1,2,3", "2,3"},
      {"COMPLETED", "0.9", 0, "1:0.9,2:0.1,3:0.3", "1,2,3", "1,3"},
      {"FAILED", NULL, 0, "", "1,2", "2"}}},
    {"keep_latest 0, keep_best_trials 2", CFG(",\"checkpoint_policy\":{\"keep_latest\":0,\"keep_best_trials\":2}",
                                                "random"), "COMPLETED", 0,
     {{"COMPLETED", "0.5", 0, "1:0.5", "1,2", "1"},
      {"STOPPED", "0.9", 0, "2:0.9", "1,2,3", "2"},
      {"CANCELED", "0.1", 0, "1:0.1", "1", "1"}}},
    {"aggregate last: the last report scored",
     "{\"name\":\"e\",\"objective\":{\"metric\":\"acc\",\"goal\":\"maximize\",\"aggregate\":\"last\"},"
     "\"searcher\":{\"name\":\"random\"},\"checkpoint_policy\":{\"keep_latest\":0,\"keep_best_trials\":0}}",
     "COMPLETED", 0, {{"COMPLETED", "0.5", 0, "1:0.5,2:0.9,3:0.5", "1,2,3", "3"}}},
    {"aggregate best: the first report of the best value scored",
     "{\"name\":\"e\",\"objective\":{\"metric\":\"acc\",\"goal\":\"maximize\",\"aggregate\":\"best\"},"
     "\"searcher\":{\"name\":\"random\"},\"checkpoint_policy\":{\"keep_latest\":0,\"keep_best_trials\":0}}",
     "COMPLETED", 0, {{"COMPLETED", "0.9", 0, "1:0.5,2:0.9,3:0.9", "1,2,3", "2"}}},
    {"a list objective: the first one, last by default",
     "{\"name\":\"e\",\"objective\":[{\"metric\":\"acc\",\"goal\":\"maximize\"},"
     "{\"metric\":\"lat\",\"goal\":\"minimize\"}],"
     "\"searcher\":{\"name\":\"random\"},\"checkpoint_policy\":{\"keep_latest\":0,\"keep_best_trials\":0}}",
     "COMPLETED", 0, {{"COMPLETED", "0.4", 0, "1:0.4,2:0.8,3:0.4", "1,2,3", "3"}}},
    {"a running trial keeps all; a queued PBT child keeps its parent's newest",
     CFG(",\"checkpoint_policy\":{\"keep_latest\":0,\"keep_best_trials\":0}", "random"), "ACTIVE", 0,
     {{"RUNNING", NULL, 0, "", "1,2,3", "1,2,3"},
      {"COMPLETED", "0.2", 0, "", "1,2", "2"},
      {"QUEUED", NULL, 2, "", "", ""},
      {"COMPLETED", "0.3", 0, "", "4,5", ""}}},
    {"an open ASHA experiment keeps every trial's newest",
     CFG(",\"checkpoint_policy\":{\"keep_latest\":0,\"keep_best_trials\":0}", "asha"), "PAUSED", 0,
     {{"STOPPED", "0.2", 0, "", "1,2", "2"}, {"COMPLETED", "0.3", 0, "", "3", "3"}}},
    {"the same ASHA experiment once ended: the policy only",
     CFG(",\"checkpoint_policy\":{\"keep_latest\":0,\"keep_best_trials\":1}", "asha"), "COMPLETED", 0,
     {{"STOPPED", "0.2", 0, "", "1,2", ""}, {"COMPLETED", "0.3", 0, "", "3", "3"}}},
    {"archived: nothing", CFG("", "random"), "CANCELED", 1,
     {{"COMPLETED", "0.9", 0, "1:0.9", "1,2", ""}, {"PAUSED", NULL, 0, "", "1", ""}}},
};

static void build_case(env *e, const dbcase *c, int64_t xid)
{
    sql(e, "INSERT INTO experiments(id,name,state,config,max_trials,created_at,archived) VALUES(%lld,'e','%s','%s',9,0,%d)",
        (long long)xid, c->exp_state, c->config, c->archived);
    for (int t = 0; t < MAXT && c->tr[t].state; t++) {
        const dbtrial *d = &c->tr[t];
        int64_t tid = xid * 100 + t + 1;
        sql(e, "INSERT INTO trials(id,experiment_id,idx,state,hparams,budget,objective,created_at) "
               "VALUES(%lld,%lld,%d,'%s','{}',1,%s,0)", (long long)tid, (long long)xid, t, d->state,
            d->objective ? d->objective : "NULL");
        if (d->parent) sql(e, "UPDATE trials SET parent_trial=%lld WHERE id=%lld", (long long)(xid * 100 + d->parent),
                           (long long)tid);
        for (const char *m = d->metrics; m && *m;) {
            long long step = strtoll(m, (char **)&m, 10);
            double v = strtod(m + 1, (char **)&m);
            sql(e, "INSERT INTO metrics(trial_id,attempt,name,step,value,time) VALUES(%lld,0,'acc',%lld,%.17g,0)",
                (long long)tid, step, v);
            if (*m == ',') m++;
        }
        int64_t steps[MAXC];
        size_t n = parse_steps(d->steps, steps);
        for (size_t j = 0; j < n; j++) {
            char content[64], sha[65];
            snprintf(content, sizeof content, "exp %lld trial %d step %lld", (long long)xid, t, (long long)steps[j]);
            put_ckpt(e, tid, steps[j], content, sha);
        }
    }
}

static void test_db_table(void **state)
{
    (void)state;
    env e;
    env_open(&e, "table");
    for (size_t c = 0; c < sizeof dbcases / sizeof dbcases[0]; c++) build_case(&e, &dbcases[c], (int64_t)c + 1);
    assert_int_equal(ckretain_sweep(e.cr, 0), 0);
    int64_t rows = 0;
    for (size_t c = 0; c < sizeof dbcases / sizeof dbcases[0]; c++)
        for (int t = 0; t < MAXT && dbcases[c].tr[t].state; t++) {
            char got[128];
            kept_steps(&e, (int64_t)(c + 1) * 100 + t + 1, got, sizeof got);
            if (strcmp(got, dbcases[c].tr[t].want))
                fail_msg("%s: trial %d kept \"%s\", expected \"%s\"", dbcases[c].name, t, got, dbcases[c].tr[t].want);
            int64_t k[MAXC];
            rows += (int64_t)parse_steps(got, k);
        }
    /* Every content was distinct: exactly one object per kept row, and
     * each kept row's object is there. */
    assert_int_equal(count_objects(), rows);
    assert_int_equal(unit_one_int(store_db(e.st), "SELECT COUNT(*) FROM checkpoints"), rows);
    int64_t objects, bytes;
    ckstore_stats(e.ck, &objects, &bytes);
    assert_int_equal(objects, rows);
    ckretain_stats cs;
    ckretain_get_stats(e.cr, &cs);
    assert_true(cs.rows_deleted > 0);
    assert_int_equal(cs.rows_deleted, cs.objects_freed);
    /* Each kept row of an ended trial stores the metrics of its step
     * (schema/0014), and the list marks the row that scored the objective. */
    char *m = one_text(store_db(e.st), "SELECT metrics FROM checkpoints WHERE trial_id=101 AND step=2");
    assert_string_equal(m, "{\"acc\":0.5}");
    free(m);
    json_t *list = NULL;
    assert_int_equal(ckstore_list(e.ck, 101, &list), 0);
    assert_int_equal(json_integer_value(json_object_get(list, "scored_step")), 2);
    json_t *rows_j = json_object_get(list, "checkpoints");
    assert_int_equal(json_array_size(rows_j), 2);
    assert_true(json_is_true(json_object_get(json_array_get(rows_j, 0), "scored")));
    assert_true(json_is_false(json_object_get(json_array_get(rows_j, 1), "scored")));
    assert_true(json_real_value(json_object_get(json_object_get(json_array_get(rows_j, 1), "metrics"), "acc")) == 0.4);
    json_decref(list);
    /* aggregate "last": the last report at step 3 scored. */
    assert_int_equal(ckstore_list(e.ck, 301, &list), 0);
    assert_int_equal(json_integer_value(json_object_get(list, "scored_step")), 3);
    json_decref(list);
    /* A list objective: its first, "last" by default. */
    assert_int_equal(ckstore_list(e.ck, 501, &list), 0);
    assert_int_equal(json_integer_value(json_object_get(list, "scored_step")), 3);
    json_decref(list);
    /* Its own deletes count as a change: the next pass looks once more (a
     * checkpoint recorded while a pass ran is not missed; it once lay past
     * the policy until a restart) and deletes nothing; after that, nothing
     * changed and a pass skips the work. */
    assert_int_equal(ckretain_sweep(e.cr, 0), 0);
    ckretain_stats cs2, cs3;
    ckretain_get_stats(e.cr, &cs2);
    assert_int_equal(cs2.sweeps, cs.sweeps + 1);
    assert_int_equal(cs2.rows_deleted, cs.rows_deleted);
    assert_int_equal(ckretain_sweep(e.cr, 0), 0);
    ckretain_get_stats(e.cr, &cs3);
    assert_int_equal(cs3.sweeps, cs2.sweeps);
    env_close(&e);
}

/* One object named by a dropped and a kept row stays; usage counts it once. */
static void test_shared_object(void **state)
{
    (void)state;
    env e;
    char a[65], b[65], c2[65];
    env_open(&e, "shared");
    sql(&e, "INSERT INTO experiments(id,name,state,config,max_trials,created_at) VALUES(1,'e','COMPLETED','%s',9,0)",
        CFG(",\"checkpoint_policy\":{\"keep_latest\":1,\"keep_best_trials\":0}", "random"));
    sql(&e, "INSERT INTO trials(id,experiment_id,idx,state,hparams,budget,created_at) VALUES(1,1,0,'COMPLETED','{}',1,0)");
    sql(&e, "INSERT INTO trials(id,experiment_id,idx,state,hparams,budget,created_at) VALUES(2,1,1,'COMPLETED','{}',1,0)");
    put_ckpt(&e, 1, 1, "same bytes", a);
    put_ckpt(&e, 1, 2, "trial 1 newest", b);
    put_ckpt(&e, 2, 1, "same bytes", c2);
    assert_string_equal(a, c2);
    ckretain_usage u;
    assert_int_equal(ckretain_usage_of(e.cr, 1, &u), 0);
    assert_int_equal(u.objects, 2);
    assert_int_equal(u.bytes, (int64_t)(strlen("same bytes") + strlen("trial 1 newest")));
    assert_int_equal(ckretain_sweep(e.cr, 1), 0);
    assert_int_equal(unit_one_int(store_db(e.st), "SELECT COUNT(*) FROM checkpoints"), 2);
    assert_true(object_exists(a));   /* trial 2's newest names it */
    assert_true(object_exists(b));
    /* Deleting the remaining rows frees both. */
    char (*objs)[CKSTORE_HASH_LEN + 1] = NULL;
    size_t n = 0;
    assert_int_equal(ckretain_objects_of(e.cr, 1, &objs, &n), 0);
    assert_int_equal(n, 2);
    sql(&e, "DELETE FROM checkpoints");
    assert_int_equal(ckretain_release(e.cr, (const char(*)[CKSTORE_HASH_LEN + 1])objs, n), 0);
    free(objs);
    assert_false(object_exists(a));
    assert_false(object_exists(b));
    assert_int_equal(ckretain_usage_of(e.cr, 1, &u), 0);
    assert_int_equal(u.bytes, 0);
    env_close(&e);
}

/* Start-up GC: old unnamed objects go; young ones, named ones and an
 * experiment's code context stay. */
static void test_orphans(void **state)
{
    (void)state;
    env e;
    char named[65], young[65], old[65], ctx[65];
    env_open(&e, "orphans");
    sql(&e, "INSERT INTO experiments(id,name,state,config,max_trials,created_at) VALUES(1,'e','ACTIVE','{}',9,0)");
    sql(&e, "INSERT INTO trials(id,experiment_id,idx,state,hparams,budget,created_at) VALUES(1,1,0,'RUNNING','{}',1,0)");
    put_ckpt(&e, 1, 1, "named", named);
    put_ckpt(&e, 1, 2, "young orphan", young);
    put_ckpt(&e, 1, 3, "old orphan", old);
    put_ckpt(&e, 1, 4, "code context", ctx);
    sql(&e, "DELETE FROM checkpoints WHERE step>1");   /* as a crash between the rename and the row leaves it */
    sql(&e, "UPDATE experiments SET config='{\"context\":\"%s\"}'", ctx);
    struct timespec ts[2] = {{.tv_sec = 1000}, {.tv_sec = 1000}};   /* 1970: older than any grace */
    char p[1024];
    const char *olds[] = {named, old, ctx};
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/objects/%.2s/%s", ckdir, olds[i], olds[i]);
        assert_int_equal(utimensat(AT_FDCWD, p, ts, 0), 0);
    }
    int64_t n = 0, b = 0;
    assert_int_equal(ckretain_gc_orphans(e.cr, 3600000, &n, &b), 0);
    assert_int_equal(n, 1);
    assert_int_equal(b, (int64_t)strlen("old orphan"));
    assert_true(object_exists(named));
    assert_true(object_exists(young));
    assert_true(object_exists(ctx));
    assert_false(object_exists(old));
    /* Grace 0: the young orphan goes too. */
    assert_int_equal(ckretain_gc_orphans(e.cr, 0, &n, &b), 0);
    assert_int_equal(n, 1);
    assert_false(object_exists(young));
    env_close(&e);
}

/* An upload committed, then collected before its row: the row is refused. */
static void test_record_after_collect(void **state)
{
    (void)state;
    env e;
    ckstore_upload *up = NULL;
    ckstore_info info = {.step = 1};
    char sha[65], msg[128];
    env_open(&e, "race");
    sql(&e, "INSERT INTO experiments(id,name,state,config,max_trials,created_at) VALUES(1,'e','ACTIVE','{}',9,0)");
    sql(&e, "INSERT INTO trials(id,experiment_id,idx,state,hparams,budget,created_at) VALUES(1,1,0,'RUNNING','{}',1,0)");
    unit_sha_hex("late", 4, sha);
    assert_int_equal(ckstore_upload_begin(e.ck, sha, 4, &up), 0);
    assert_int_equal(ckstore_upload_write(up, "late", 4), 0);
    assert_int_equal(ckstore_upload_commit(up, &info, msg, sizeof msg), 0);
    int64_t freed = 0;
    assert_int_equal(ckstore_release(e.ck, sha, &freed), 0);   /* no row yet: collected */
    assert_int_equal(freed, 4);
    assert_int_equal(ckstore_record(e.ck, 1, &info), HF_ECORRUPT);
    assert_int_equal(unit_one_int(store_db(e.st), "SELECT COUNT(*) FROM checkpoints"), 0);
    assert_int_equal(ckstore_release(e.ck, "not-a-hash", NULL), HF_EINVAL);
    env_close(&e);
}

/* The background thread: named "hf-ckretain", a kick runs a pass at
 * once (the 1 s interval has not passed: a pass ends within 900 ms), and close stops it promptly. */
static void test_thread(void **state)
{
    (void)state;
    env e;
    env_open(&e, "thread");
    assert_int_equal(ckretain_start(e.cr), 0);
    assert_int_equal(unit_threads_named("hf-ckretain"), 1);
    ckretain_stats st0, st1;
    hf_sleep_ms(100);   /* the start-up GC and the first pass */
    ckretain_get_stats(e.cr, &st0);
    sql(&e, "INSERT INTO events(time,experiment_id,trial_id,type,detail) VALUES(1,NULL,NULL,'TEST','kick')");
    ckretain_kick(e.cr);   /* something changed: the pass looks at the rows */
    int64_t t0 = hf_mono_ms();
    do {
        hf_sleep_ms(5);
        ckretain_get_stats(e.cr, &st1);
    } while (st1.sweeps == st0.sweeps && hf_mono_ms() - t0 < 900);
    assert_true(st1.sweeps > st0.sweeps);
    t0 = hf_mono_ms();
    env_close(&e);
    assert_true(hf_mono_ms() - t0 < 500);
    assert_int_equal(unit_threads_settle("hf-ckretain", 0), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decide_table),
        cmocka_unit_test(test_db_table),
        cmocka_unit_test(test_shared_object),
        cmocka_unit_test(test_orphans),
        cmocka_unit_test(test_record_after_collect),
        cmocka_unit_test(test_thread),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
