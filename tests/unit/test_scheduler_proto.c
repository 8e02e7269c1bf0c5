/*
 * test_scheduler_proto.c — the scheduler's side of the agent protocol
 * (scheduler/core/sched_proto.c), table-driven: each bad registration or
 * heartbeat body is rejected with HF_EINVAL and the offending field's path
 * (docs/protocol.md), before the core applies any of it; good bodies hand
 * back their arrays, instance and batch.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "hf_err.h"
#include "scheduler/core/sched_int.h"

#include <stdio.h>
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_bodies),
        cmocka_unit_test(test_good_bodies),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
