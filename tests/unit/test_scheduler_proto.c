/*
 * test_scheduler_proto.c — the scheduler's side of the agent protocol
 * (scheduler/core/sched_proto.c), table-driven: each bad registration or
 * heartbeat body is rejected with HF_EINVAL and the offending field's path
 * (docs/protocol.md), before the core applies any of it; good bodies hand
 * back their arrays, instance and batch.
 *
 * The assignment (proto_assignment, on a real core and store): the trial
 * contract travels as typed fields (common/hf_trial.h) that the agent's
 * hf_trial_decode accepts, with the values trials always saw; "env" is the
 * experiment's trial.env alone, and no variable's name is on the wire.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "hf_err.h"
#include "hf_trial.h"
#include "scheduler/core/expmeta.h"
#include "scheduler/core/sched.h"
#include "scheduler/core/sched_int.h"
#include "scheduler/store/store.h"
#include "tests/unit/unit_fixture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct bad_case {
    const char *body;
    const char *field;   /* expected hf_jerr.field */
} bad_case;

static const bad_case bad_heartbeats[] = {
    {"[]", ""},
    {"{\"nope\": 1}", "nope"},
    {"{\"instance\": \"\", \"batch\": 1}", "instance"},
    {"{\"instance\": \"i1\"}", "batch"},
    {"{\"batch\": 3}", "instance"},
    {"{\"running\": [{\"attempt\": 1}]}", "running[0].trial_id"},
    {"{\"events\": {}}", "events"},
    {"{\"events\": [{\"trial_id\": 1, \"attempt\": 1, \"type\": \"paused\"}]}", "events[0].type"},
    {"{\"events\": [{\"trial_id\": 1, \"attempt\": 1, \"type\": \"exited\", \"exit_code\": 5000}]}",
     "events[0].exit_code"},
    {"{\"metrics\": [{\"trial_id\": 1, \"attempt\": 1}]}", "metrics[0].values"},
    {"{\"metrics\": [{\"trial_id\": 1, \"attempt\": 1, \"values\": {\"bad name\": 1}}]}",
     "metrics[0].values.bad name"},
    {"{\"metrics\": [{\"trial_id\": 1, \"attempt\": 1, \"values\": {\"loss\": \"x\"}}]}",
     "metrics[0].values.loss"},
    {"{\"logs\": [{\"trial_id\": 1, \"attempt\": 1, \"stream\": \"stdin\", \"line\": \"x\"}]}",
     "logs[0].stream"},
    {"{\"logs\": [1]}", "logs[0]"},
    /* every array is checked as an array before any item is */
    {"{\"events\": [{\"trial_id\": 0}], \"logs\": 3}", "logs"},
};

static int check_heartbeat(const json_t *b, hf_jerr *e)
{
    hb_items in;
    return proto_heartbeat_check(b, &in, e);
}

static int check_register(const json_t *b, hf_jerr *e)
{
    reg_body r;
    return proto_register_check(b, &r, e);
}

/* Every case is rejected with HF_EINVAL naming its field. */
static void expect_rejected(const bad_case *cases, size_t n, int (*check)(const json_t *, hf_jerr *))
{
    for (size_t i = 0; i < n; i++) {
        json_t *b = json_loads(cases[i].body, 0, NULL);
        hf_jerr e;
        memset(&e, 0, sizeof e);
        if (!b) fail_msg("case %zu: not JSON", i);
        int rc = check(b, &e);
        if (rc != HF_EINVAL) fail_msg("case %zu (%s): rc %d, expected HF_EINVAL", i, cases[i].body, rc);
        if (strcmp(e.field, cases[i].field) != 0)
            fail_msg("case %zu: field \"%s\" (%s), expected \"%s\"", i, e.field, e.msg, cases[i].field);
        json_decref(b);
    }
}

/* A full heartbeat hands back its arrays, instance and batch; an empty one
 * none of them. */
static void heartbeat_good(void)
{
    json_t *b = json_loads("{\"instance\": \"i1\", \"batch\": 7, \"running\": [{\"trial_id\": 3, \"attempt\": 1}],"
                           "\"events\": [{\"trial_id\": 3, \"attempt\": 1, \"type\": \"started\", \"pid\": 9}],"
                           "\"metrics\": [{\"trial_id\": 3, \"attempt\": 1, \"step\": 2, \"epoch\": 1.5,"
                           "\"values\": {\"loss\": 0.5}}],"
                           "\"logs\": [{\"trial_id\": 3, \"attempt\": 1, \"stream\": \"stderr\", \"line\": \"hi\"}]}",
                           0, NULL);
    hb_items in;
    hf_jerr e;
    assert_non_null(b);
    assert_int_equal(proto_heartbeat_check(b, &in, &e), 0);
    assert_string_equal(in.instance, "i1");
    assert_int_equal(in.batch, 7);
    const json_t *arrays[] = {in.running, in.events, in.metrics, in.logs};
    for (size_t k = 0; k < sizeof arrays / sizeof arrays[0]; k++) assert_int_equal(json_array_size(arrays[k]), 1);
    json_decref(b);

    /* An empty heartbeat: no arrays, no batch. */
    b = json_loads("{}", 0, NULL);
    assert_int_equal(proto_heartbeat_check(b, &in, &e), 0);
    assert_null(in.instance);
    assert_int_equal(in.batch, 0);
    assert_null(in.running);
    assert_null(in.events);
    assert_null(in.metrics);
    assert_null(in.logs);
    json_decref(b);
}

static const bad_case bad_registrations[] = {
    {"{\"slots\": 2}", "name"},
    {"{\"name\": \"a b\", \"slots\": 2}", "name"},
    {"{\"name\": \"a\"}", "slots"},
    {"{\"name\": \"a\", \"slots\": 5000}", "slots"},
    {"{\"name\": \"a\", \"slots\": 2, \"gpus\": [{\"name\": \"x\"}]}", "gpus[0].index"},
    {"{\"name\": \"a\", \"slots\": 2, \"gpus\": [7]}", "gpus[0]"},
    {"{\"name\": \"a\", \"slots\": 2, \"running\": [{\"trial_id\": 1, \"attempt\": -1}]}", "running[0].attempt"},
    {"{\"name\": \"a\", \"slots\": 2, \"extra\": true}", "extra"},
};

/* A full registration hands back its fields; running[] matches a rank. */
static void register_good(void)
{
    json_t *b = json_loads("{\"name\": \"node-1.a:b_c\", \"slots\": 4, \"host\": \"10.0.0.2\", \"version\": \"0.1\","
                           "\"gpus\": [{\"index\": 0, \"name\": \"H100\", \"memory_mb\": 81920}],"
                           "\"running\": [{\"trial_id\": 2, \"attempt\": 3, \"pid\": 10, \"rank\": 1}],"
                           "\"labels\": {}}",
                           0, NULL);
    reg_body r;
    hf_jerr e;
    assert_non_null(b);
    assert_int_equal(proto_register_check(b, &r, &e), 0);
    assert_string_equal(r.name, "node-1.a:b_c");
    assert_int_equal(r.slots, 4);
    assert_string_equal(r.host, "10.0.0.2");
    assert_string_equal(r.version, "0.1");
    assert_int_equal(json_array_size(r.gpus), 1);
    assert_int_equal(json_array_size(r.running), 1);
    /* running[] matching: any rank when the agent holds one rank of the trial */
    assert_true(proto_running_has(r.running, 2, 3, 1, 2));
    assert_false(proto_running_has(r.running, 2, 3, 0, 2));
    assert_true(proto_running_has(r.running, 2, 3, 0, 1));
    assert_false(proto_running_has(r.running, 2, 2, 1, 1));
    json_decref(b);
}

static void test_bad_bodies(void **state)
{
    (void)state;
    expect_rejected(bad_heartbeats, sizeof bad_heartbeats / sizeof bad_heartbeats[0], check_heartbeat);
    expect_rejected(bad_registrations, sizeof bad_registrations / sizeof bad_registrations[0], check_register);
}

static void test_good_bodies(void **state)
{
    (void)state;
    heartbeat_good();
    register_good();
}

/* One 2-worker trial with env, distributed, a seed and a budget: the two
 * assignments a heartbeat hands out. */
static void test_assignment_contract(void **state)
{
    (void)state;
    char dir[256], path[320];
    store *st = NULL;
    sched *c = NULL;
    hf_jerr e;
    assert_int_equal(unit_tmpdir(dir, sizeof dir, "proto"), 0);
    snprintf(path, sizeof path, "%s/p.db", dir);
    unit_open_core(path, NULL, &st, &c);
    int64_t xid = unit_submit(c, "{\"name\": \"p\", \"objective\": {\"metric\": \"m\", \"goal\": \"maximize\"},"
                              "\"searcher\": {\"name\": \"random\", \"max_trials\": 1, \"max_epochs\": 9, \"seed\": 5},"
                              "\"hyperparameters\": {\"lr\": {\"type\": \"log\", \"min\": 1e-4, \"max\": 0.3}},"
                              "\"trial\": {\"command\": [\"true\"], \"env\": {\"FOO\": \"bar\"},"
                              "\"resources\": {\"workers\": 2},"
                              "\"distributed\": {\"mode\": \"sync\", \"backend\": \"tcp\"}}}");
    int64_t aid = unit_register(c, "a1", 2);
    json_t *b = json_loads("{\"running\": []}", 0, NULL), *out = NULL;
    assert_int_equal(sched_agent_heartbeat(c, aid, b, &out, &e), 0);
    json_t *as = json_object_get(out, "assign");
    assert_int_equal(json_array_size(as), 2);
    int ranks = 0;
    for (size_t i = 0; i < 2; i++) {
        json_t *a = json_array_get(as, i);
        char *text = json_dumps(a, JSON_COMPACT);
        assert_null(strstr(text, "HYPERFARM_"));   /* no variable's name on the wire */
        free(text);
        json_t *env = json_object_get(a, "env");
        assert_int_equal(json_object_size(env), 1);
        assert_string_equal(json_string_value(json_object_get(env, "FOO")), "bar");

        hf_trial_vars v;
        assert_int_equal(hf_trial_decode(a, "assign[0]", &v, &e), 0);
        assert_int_equal(v.experiment_id, xid);
        assert_int_equal(v.attempt, 1);
        assert_int_equal(v.world_size, 2);
        assert_true(v.rank == 0 || v.rank == 1);
        ranks |= 1 << v.rank;
        assert_int_equal(v.local_rank, v.rank);            /* both ranks on a1 */
        assert_int_equal(v.seed, expmeta_trial_seed(5, 0)); /* the first trial: index 0 */
        assert_int_equal(v.budget, 9);
        assert_string_equal(v.dist_mode, "sync");
        assert_string_equal(v.dist_backend, "tcp");
        assert_int_equal(v.dist_ps, -1);
        assert_non_null(strstr(v.master, "127.0.0.1:"));
        /* the hyperparameters' text is the trial's, as the core dumps it */
        json_t *tr = NULL;
        assert_int_equal(sched_trial_get(c, v.trial_id, &tr), 0);
        char *want = hf_json_dump(json_object_get(tr, "hparams"));
        assert_string_equal(v.hparams, want);
        free(want);
        json_decref(tr);
        hf_trial_vars_free(&v);
    }
    assert_int_equal(ranks, 3);   /* one assignment per rank */
    json_decref(out);
    json_decref(b);
    sched_free(c);
    store_close(st);
    unit_rmtree(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_bodies),
        cmocka_unit_test(test_good_bodies),
        cmocka_unit_test(test_assignment_contract),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
