/*
 * test_scheduler_restore.c — the assignment's "restore" field
 * (scheduler/core/sched_ckpt.c, docs/protocol.md, docs/scheduler.md "The
 * checkpoint store"): the real core on a real SQLite file, checkpoints put
 * into a real store on the same file (ckstore.c, as an agent's PUT), the
 * agent played by calling the heartbeat entry point directly.
 *
 *   - a fresh trial, and a restart of a trial that stored nothing: no
 *     "restore" at all;
 *   - a restart of a trial with stored checkpoints: its newest (the last
 *     recorded, not the largest step), with sha256, size, name, step and
 *     trial exactly as stored;
 *   - PBT generation 1: every member (the exploiting one and the one that
 *     continues) gets its parent's newest, the parent being the
 *     generation-0 winner; a restarted child that stored its own
 *     checkpoint gets its own newest, not the parent's again.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "hf_err.h"
#include "scheduler/store/ckstore.h"
#include "scheduler/core/sched.h"
#include "scheduler/store/store.h"
#include "tests/unit/ckpt_fixture.h"
#include "tests/unit/unit_fixture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static char dir[256];

static int setup(void **st) { (void)st; return unit_tmpdir(dir, sizeof dir, "restore"); }
static int teardown(void **st) { (void)st; return unit_rmtree(dir); }

typedef struct env {
    store   *st;
    sched   *c;
    ckstore *ck;
    int64_t  agent;
} env;

/* A core and a checkpoint store on dir/name/t.db; one agent of slots slots. */
static void env_open(env *e, const char *name, int slots)
{
    char path[300], db[400], ckdir[400], err[256] = "";
    snprintf(path, sizeof path, "%s/%s", dir, name);
    mkdir(path, 0755);
    snprintf(db, sizeof db, "%s/t.db", path);
    snprintf(ckdir, sizeof ckdir, "%s/store", path);
    unit_open_core(db, NULL, &e->st, &e->c);
    if (ckstore_open(ckdir, db, 1 << 20, &e->ck, err, sizeof err)) fail_msg("ckstore_open: %s", err);
    e->agent = unit_register(e->c, "a1", slots);
}

static void env_close(env *e)
{
    ckstore_close(e->ck);
    sched_free(e->c);
    store_close(e->st);
}

/* One heartbeat with events (a JSON array text) and metrics (the items of
 * a JSON array, NULL: none); RET the reply's "assign" array (a new
 * reference; caller frees). */
static json_t *heartbeat(env *e, const char *events, const char *metrics)
{
    char body[4096];
    snprintf(body, sizeof body, "{\"running\": [], \"events\": %s, \"metrics\": [%s]}", events,
             metrics ? metrics : "");
    json_t *b = json_loads(body, 0, NULL), *out = NULL;
    assert_non_null(b);
    hf_jerr je;
    assert_int_equal(sched_agent_heartbeat(e->c, e->agent, b, &out, &je), 0);
    json_t *as = json_incref(json_object_get(out, "assign"));
    json_decref(out);
    json_decref(b);
    return as ? as : json_array();
}

/* Attempt att of trial t reported metric (NULL: nothing), then exited with
 * code; RET the assignments of the reply. */
static json_t *run_exit(env *e, int64_t t, int64_t att, int code, const char *metric)
{
    char ev[1024];
    snprintf(ev, sizeof ev,
             "[{\"trial_id\": %lld, \"attempt\": %lld, \"type\": \"started\", \"time\": 1, \"pid\": 100},"
             " {\"trial_id\": %lld, \"attempt\": %lld, \"type\": \"exited\", \"time\": 2, \"pid\": 100,"
             " \"exit_code\": %d}]",
             (long long)t, (long long)att, (long long)t, (long long)att, code);
    return heartbeat(e, ev, metric);
}

/* The assignment in as for trial t (borrowed), or NULL. */
static json_t *assign_of(json_t *as, int64_t t)
{
    for (size_t i = 0; i < json_array_size(as); i++) {
        json_t *a = json_array_get(as, i);
        if (json_integer_value(json_object_get(a, "trial_id")) == t) return a;
    }
    return NULL;
}

/* a's "restore" is exactly the stored checkpoint (sha, size, name, step)
 * of trial from. */
static void expect_restore(json_t *a, const char *sha, const char *content, const char *name, int64_t step,
                           int64_t from)
{
    assert_non_null(a);
    json_t *r = json_object_get(a, "restore");
    if (!r) fail_msg("assignment of trial %lld has no restore: %s", (long long)json_integer_value(
                     json_object_get(a, "trial_id")), json_dumps(a, JSON_COMPACT));
    assert_string_equal(json_string_value(json_object_get(r, "sha256")), sha);
    assert_int_equal(json_integer_value(json_object_get(r, "size")), (json_int_t)strlen(content));
    assert_string_equal(json_string_value(json_object_get(r, "name")), name);
    assert_int_equal(json_integer_value(json_object_get(r, "step")), step);
    assert_int_equal(json_integer_value(json_object_get(r, "trial")), from);
}

static int64_t trial_int(env *e, int64_t t, const char *key)
{
    json_t *tv = NULL;
    assert_int_equal(sched_trial_get(e->c, t, &tv), 0);
    int64_t v = json_integer_value(json_object_get(tv, key));
    json_decref(tv);
    return v;
}

#define SPACE "\"hyperparameters\": {\"x\": {\"type\": \"uniform\", \"min\": 0, \"max\": 1}}," \
              "\"trial\": {\"command\": [\"true\"], \"max_restarts\": 3}}"

/* A trial's own checkpoints: none before any is stored, then its newest. */
static void test_restart_restores_newest(void **state)
{
    (void)state;
    env e;
    char sha1[65], sha2[65], sha3[65];
    env_open(&e, "restart", 1);
    unit_submit(e.c, "{\"name\": \"r\", \"objective\": {\"metric\": \"m\", \"goal\": \"maximize\"},"
                     "\"searcher\": {\"name\": \"random\", \"max_trials\": 1, \"seed\": 1}," SPACE);
    json_t *as = heartbeat(&e, "[]", NULL);
    assert_int_equal(json_array_size(as), 1);
    json_t *a = json_array_get(as, 0);
    int64_t t = json_integer_value(json_object_get(a, "trial_id"));
    assert_int_equal(json_integer_value(json_object_get(a, "attempt")), 1);
    assert_null(json_object_get(a, "restore"));              /* a fresh trial */
    json_decref(as);

    /* attempt 1 fails having stored nothing: the restart has no restore */
    as = run_exit(&e, t, 1, 1, NULL);
    if (!assign_of(as, t)) { json_decref(as); as = heartbeat(&e, "[]", NULL); }
    a = assign_of(as, t);
    assert_non_null(a);
    assert_int_equal(json_integer_value(json_object_get(a, "attempt")), 2);
    assert_null(json_object_get(a, "restore"));
    json_decref(as);

    /* attempt 2 stores three, the newest recorded last (a smaller step than
     * the second: a rewind is still the newest) */
    unit_put_ckpt(e.ck, t, 100, 2, "ck.json", "{\"epoch\": 1}", sha1);
    unit_put_ckpt(e.ck, t, 300, 2, "ck.json", "{\"epoch\": 3}", sha2);
    unit_put_ckpt(e.ck, t, 200, 2, "ck-b.json", "{\"epoch\": 2, \"b\": 1}", sha3);
    as = run_exit(&e, t, 2, 1, NULL);
    if (!assign_of(as, t)) { json_decref(as); as = heartbeat(&e, "[]", NULL); }
    a = assign_of(as, t);
    assert_int_equal(json_integer_value(json_object_get(a, "attempt")), 3);
    expect_restore(a, sha3, "{\"epoch\": 2, \"b\": 1}", "ck-b.json", 200, t);
    json_decref(as);
    env_close(&e);
}

/* PBT generation 1 starts from the parent's newest; a restarted child from
 * its own. */
static void test_pbt_child_restores_parent(void **state)
{
    (void)state;
    env e;
    char shaA1[65], shaA2[65], shaB[65], shaC[65], met[256];
    env_open(&e, "pbt", 2);
    unit_submit(e.c, "{\"name\": \"p\", \"objective\": {\"metric\": \"m\", \"goal\": \"maximize\"},"
                     "\"searcher\": {\"name\": \"pbt\", \"population_size\": 2, \"perturb_interval\": 1,"
                     " \"quantile\": 0.5, \"max_trials\": 4, \"seed\": 3}," SPACE);
    json_t *as = heartbeat(&e, "[]", NULL);
    assert_int_equal(json_array_size(as), 2);
    int64_t ta = json_integer_value(json_object_get(json_array_get(as, 0), "trial_id"));
    int64_t tb = json_integer_value(json_object_get(json_array_get(as, 1), "trial_id"));
    for (size_t i = 0; i < 2; i++) assert_null(json_object_get(json_array_get(as, i), "restore"));
    json_decref(as);

    /* a is the winner; its newest is the step-2 one (recorded after b's) */
    unit_put_ckpt(e.ck, ta, 1, 1, "w.bin", "a-1", shaA1);
    unit_put_ckpt(e.ck, tb, 1, 1, "w.bin", "b-1", shaB);
    unit_put_ckpt(e.ck, ta, 2, 1, "w.bin", "a-2", shaA2);
    snprintf(met, sizeof met, "{\"trial_id\": %lld, \"attempt\": 1, \"step\": 1, \"epoch\": 1, \"values\": "
             "{\"m\": 0.1}}", (long long)tb);
    json_t *got = run_exit(&e, tb, 1, 0, met);
    json_decref(got);
    snprintf(met, sizeof met, "{\"trial_id\": %lld, \"attempt\": 1, \"step\": 1, \"epoch\": 1, \"values\": "
             "{\"m\": 0.9}}", (long long)ta);
    as = run_exit(&e, ta, 1, 0, met);
    if (json_array_size(as) < 2) {
        json_t *more = heartbeat(&e, "[]", NULL);
        json_array_extend(as, more);
        json_decref(more);
    }
    assert_int_equal(json_array_size(as), 2);
    int64_t child = 0;
    for (size_t i = 0; i < 2; i++) {
        json_t *a = json_array_get(as, i);
        int64_t t = json_integer_value(json_object_get(a, "trial_id"));
        assert_true(t != ta && t != tb);
        /* both descend from the winner: one continues it, one exploits it */
        assert_int_equal(trial_int(&e, t, "parent_trial"), ta);
        expect_restore(a, shaA2, "a-2", "w.bin", 2, ta);
        child = t;
    }
    json_decref(as);

    /* the child stores its own checkpoint and fails: its own newest now */
    unit_put_ckpt(e.ck, child, 3, 1, "w.bin", "child-3", shaC);
    as = run_exit(&e, child, 1, 1, NULL);
    if (!assign_of(as, child)) { json_decref(as); as = heartbeat(&e, "[]", NULL); }
    json_t *a = assign_of(as, child);
    assert_int_equal(json_integer_value(json_object_get(a, "attempt")), 2);
    expect_restore(a, shaC, "child-3", "w.bin", 3, child);
    json_decref(as);
    env_close(&e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_restart_restores_newest),
        cmocka_unit_test(test_pbt_child_restores_parent),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
