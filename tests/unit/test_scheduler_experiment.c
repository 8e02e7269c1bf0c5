/*
 * test_scheduler_experiment.c — experiment-file validation, table-driven:
 * each bad input must be rejected with the expected field path; good ones
 * accepted with the right defaults.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "hf_err.h"
#include "scheduler/core/experiment.h"
#include "scheduler/core/sched_int.h"   /* metric_minimized */

#include <stdio.h>
#include <string.h>

#define GOOD_HP  "\"hyperparameters\":{\"lr\":{\"type\":\"log\",\"min\":0.0001,\"max\":0.3}," \
                 "\"hidden\":{\"type\":\"int\",\"min\":64,\"max\":512}," \
                 "\"opt\":{\"type\":\"categorical\",\"values\":[\"sgd\",\"adam\"]},\"batch_size\":128}"
#define GOOD_OBJ "\"objective\":{\"metric\":\"val_acc\",\"goal\":\"maximize\"}"
#define GOOD_SR  "\"searcher\":{\"name\":\"random\",\"max_trials\":8,\"max_concurrent_trials\":2,\"seed\":3}"
#define GOOD_TR  "\"trial\":{\"command\":[\"hyperfarm-train\",\"--model\",\"mlp\"]," \
                 "\"resources\":{\"workers\":2,\"slots_per_worker\":2},\"max_restarts\":3}"

static const char *good = "{\"name\":\"x\"," GOOD_OBJ "," GOOD_SR "," GOOD_HP "," GOOD_TR "}";

static void test_good(void **state)
{
    (void)state;
    json_t *j = json_loads(good, 0, NULL);
    exp_spec sp;
    hf_jerr e;
    assert_non_null(j);
    assert_int_equal(experiment_parse(j, &sp, &e), 0);
    assert_string_equal(sp.metric, "val_acc");
    assert_true(sp.goal_max);
    assert_int_equal(sp.max_trials, 8);
    assert_int_equal(sp.max_concurrent, 2);
    assert_int_equal(sp.workers, 2);
    assert_int_equal(sp.slots_per_worker, 2);
    assert_int_equal(sp.max_restarts, 3);
    assert_int_equal(sp.seed, 3);
    assert_int_equal(json_array_size(sp.argv), 3);
    assert_int_equal(sp.keep_latest, 1);      /* Determined's defaults */
    assert_int_equal(sp.keep_best_trials, 1);
    experiment_spec_free(&sp);
    json_decref(j);
}

/* objective.aggregate: "best" by default with one objective, "last" with a
 * list (docs/guide.md "The objective"); either may be named. */
static void test_aggregate(void **state)
{
    (void)state;
    static const struct { const char *obj; int last; } cases[] = {
        {GOOD_OBJ, 0},
        {"\"objective\":{\"metric\":\"a\",\"goal\":\"maximize\",\"aggregate\":\"last\"}", 1},
        {"\"objective\":{\"metric\":\"a\",\"goal\":\"maximize\",\"aggregate\":\"best\"}", 0},
        {"\"objective\":[{\"metric\":\"a\",\"goal\":\"maximize\"},{\"metric\":\"b\",\"goal\":\"minimize\"}]", 1},
        {"\"objective\":[{\"metric\":\"a\",\"goal\":\"maximize\",\"aggregate\":\"last\"},"
         "{\"metric\":\"b\",\"goal\":\"minimize\"}]", 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char t[2048];
        snprintf(t, sizeof t, "{\"name\":\"x\",%s," GOOD_SR "," GOOD_HP "," GOOD_TR "}", cases[i].obj);
        json_t *j = json_loads(t, 0, NULL);
        exp_spec sp;
        hf_jerr e;
        assert_non_null(j);
        if (experiment_parse(j, &sp, &e)) fail_msg("case %zu: %s: %s", i, e.field, e.msg);
        if (sp.agg_last != cases[i].last) fail_msg("case %zu: agg_last %d", i, sp.agg_last);
        experiment_spec_free(&sp);
        json_decref(j);
    }
}

/* Each metric's direction (docs/guide.md "The objective"): objectives by
 * their goal, others by their name. */
static void test_metric_direction(void **state)
{
    (void)state;
    static const struct { const char *name; int min; } cases[] = {
        {"val_acc", 0},            /* the objective: maximize */
        {"lat", 1},                /* objective[1]: minimize */
        {"train_loss", 1}, {"val_error", 1}, {"perplexity", 1}, {"epoch_seconds", 1}, {"step_time", 1},
        {"p99_latency", 1}, {"fwd_ms", 1}, {"Epoch_Seconds", 1},
        {"samples_per_second", 0}, {"tokens_per_sec", 0}, {"img/s", 0}, {"throughput_time", 0},
        {"accuracy", 0}, {"f1", 0}, {"reward", 0},
    };
    json_t *j = json_loads("{\"name\":\"x\",\"objective\":[{\"metric\":\"val_acc\",\"goal\":\"maximize\"},"
                           "{\"metric\":\"lat\",\"goal\":\"minimize\"}]," GOOD_SR "," GOOD_HP "," GOOD_TR "}", 0, NULL);
    experiment x;
    hf_jerr e;
    memset(&x, 0, sizeof x);
    assert_non_null(j);
    assert_int_equal(experiment_parse(j, &x.spec, &e), 0);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (metric_minimized(&x, cases[i].name) != cases[i].min)
            fail_msg("%s: minimized %d, expected %d", cases[i].name, !cases[i].min, cases[i].min);
    experiment_spec_free(&x.spec);
    json_decref(j);
}

/* checkpoint_policy: absent (the defaults), partial, complete. */
static void test_checkpoint_policy(void **state)
{
    (void)state;
    static const struct { const char *policy; int64_t latest, best; } cases[] = {
        {"", 1, 1},
        {",\"checkpoint_policy\":{\"keep_best_trials\":4}", 1, 4},
        {",\"checkpoint_policy\":{\"keep_latest\":3,\"keep_best_trials\":0}", 3, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char t[1024];
        exp_spec sp;
        hf_jerr e;
        snprintf(t, sizeof t, "{\"name\":\"x\"," GOOD_OBJ ",\"searcher\":{\"name\":\"random\",\"max_trials\":2},"
                 GOOD_HP ",\"trial\":{\"command\":[\"a\"]}%s}", cases[i].policy);
        json_t *j = json_loads(t, 0, NULL);
        if (!j || experiment_parse(j, &sp, &e)) fail_msg("case %zu refused: %s", i, e.msg);
        if (sp.keep_latest != cases[i].latest || sp.keep_best_trials != cases[i].best)
            fail_msg("case %zu: keep_latest %lld keep_best_trials %lld", i, (long long)sp.keep_latest,
                     (long long)sp.keep_best_trials);
        experiment_spec_free(&sp);
        json_decref(j);
    }
}

static void test_seed_chosen_and_stored(void **state)
{
    (void)state;
    const char *t = "{\"name\":\"x\"," GOOD_OBJ ",\"searcher\":{\"name\":\"random\",\"max_trials\":2}," GOOD_HP
                    ",\"trial\":{\"command\":[\"a\"]}}";
    json_t *j = json_loads(t, 0, NULL);
    exp_spec sp;
    hf_jerr e;
    assert_int_equal(experiment_parse(j, &sp, &e), 0);
    assert_true(json_is_integer(json_object_get(json_object_get(j, "searcher"), "seed")));
    assert_int_equal(sp.workers, 1);
    assert_int_equal(sp.slots_per_worker, 1);
    assert_int_equal(sp.max_concurrent, 2);   /* defaults to max_trials */
    experiment_spec_free(&sp);
    json_decref(j);
}

typedef struct bad_case {
    const char *json;
    const char *field;    /* expected field path ("" = whole document) */
} bad_case;

static const bad_case bad[] = {
    {"[]", ""},
    {"{\"objective\":{}}", "name"},
    {"{\"name\":\"x\",\"objective\":{\"metric\":\"a\",\"goal\":\"maximize\",\"aggregate\":\"mean\"}," GOOD_SR ","
     GOOD_HP "," GOOD_TR "}", "objective.aggregate"},
    {"{\"name\":\"x\",\"objective\":{\"metric\":\"a\",\"goal\":\"maximize\",\"aggregate\":1}," GOOD_SR ","
     GOOD_HP "," GOOD_TR "}", "objective.aggregate"},
    {"{\"name\":\"x\",\"objective\":[{\"metric\":\"a\",\"goal\":\"maximize\",\"aggregate\":\"last\"},"
     "{\"metric\":\"b\",\"goal\":\"minimize\",\"aggregate\":\"best\"}]," GOOD_SR "," GOOD_HP "," GOOD_TR "}",
     "objective[1].aggregate"},
    {"{\"name\":5}", "name"},
    {"{\"name\":\"\"}", "name"},
    {"{\"name\":\"x\",\"bogus\":1}", "bogus"},
    {"{\"name\":\"x\"}", "objective"},
    {"{\"name\":\"x\",\"objective\":{\"metric\":\"val acc\",\"goal\":\"maximize\"}}", "objective.metric"},
    {"{\"name\":\"x\",\"objective\":{\"metric\":\"val_acc\",\"goal\":\"up\"}}", "objective.goal"},
    {"{\"name\":\"x\"," GOOD_OBJ "," GOOD_SR "}", "hyperparameters"},
    {"{\"name\":\"x\"," GOOD_OBJ "," GOOD_HP "}", "searcher"},
    {"{\"name\":\"x\"," GOOD_OBJ ",\"searcher\":{\"name\":\"nope\",\"max_trials\":3}," GOOD_HP "," GOOD_TR "}",
     "searcher.name"},
    {"{\"name\":\"x\"," GOOD_OBJ ",\"searcher\":{\"name\":\"random\",\"max_trials\":0}," GOOD_HP "," GOOD_TR "}",
     "searcher.max_trials"},
    {"{\"name\":\"x\"," GOOD_OBJ ",\"searcher\":{\"name\":\"random\",\"max_trials\":\"8\"}," GOOD_HP "," GOOD_TR "}",
     "searcher.max_trials"},
    {"{\"name\":\"x\"," GOOD_OBJ ",\"searcher\":{\"name\":\"random\",\"max_trials\":4,\"max_concurrent_trials\":-1},"
     GOOD_HP "," GOOD_TR "}", "searcher.max_concurrent_trials"},
    {"{\"name\":\"x\"," GOOD_OBJ "," GOOD_SR ",\"hyperparameters\":{\"lr\":{\"type\":\"log\",\"min\":0.3,\"max\":0.1}},"
     GOOD_TR "}", "hyperparameters.lr.max"},
    {"{\"name\":\"x\"," GOOD_OBJ "," GOOD_SR ",\"hyperparameters\":{\"lr\":{\"type\":\"weird\"}}," GOOD_TR "}",
     "hyperparameters.lr.type"},
    {"{\"name\":\"x\"," GOOD_OBJ "," GOOD_SR "," GOOD_HP "}", "trial"},
    {"{\"name\":\"x\"," GOOD_OBJ "," GOOD_SR "," GOOD_HP ",\"trial\":{}}", "trial.command"},
    {"{\"name\":\"x\"," GOOD_OBJ "," GOOD_SR "," GOOD_HP ",\"trial\":{\"command\":[]}}", "trial.command"},
    {"{\"name\":\"x\"," GOOD_OBJ "," GOOD_SR "," GOOD_HP ",\"trial\":{\"command\":\"train --lr 1\"}}", "trial.command"},
    {"{\"name\":\"x\"," GOOD_OBJ "," GOOD_SR "," GOOD_HP ",\"trial\":{\"command\":[\"a\",3]}}", "trial.command[1]"},
    {"{\"name\":\"x\"," GOOD_OBJ "," GOOD_SR "," GOOD_HP ",\"trial\":{\"command\":[\"\"]}}", "trial.command[0]"},
    {"{\"name\":\"x\"," GOOD_OBJ "," GOOD_SR "," GOOD_HP
     ",\"trial\":{\"command\":[\"a\"],\"resources\":{\"workers\":0}}}", "trial.resources.workers"},
    {"{\"name\":\"x\"," GOOD_OBJ "," GOOD_SR "," GOOD_HP
     ",\"trial\":{\"command\":[\"a\"],\"resources\":{\"slots_per_worker\":1000}}}", "trial.resources.slots_per_worker"},
    {"{\"name\":\"x\"," GOOD_OBJ "," GOOD_SR "," GOOD_HP
     ",\"trial\":{\"command\":[\"a\"],\"resources\":{\"gpus\":1}}}", "trial.resources.gpus"},
    {"{\"name\":\"x\"," GOOD_OBJ "," GOOD_SR "," GOOD_HP ",\"trial\":{\"command\":[\"a\"],\"max_restarts\":-1}}",
     "trial.max_restarts"},
    {"{\"name\":\"x\"," GOOD_OBJ "," GOOD_SR "," GOOD_HP ",\"trial\":{\"command\":[\"a\"],\"max_restarts\":1.5}}",
     "trial.max_restarts"},
    {"{\"name\":\"x\"," GOOD_OBJ "," GOOD_SR "," GOOD_HP
     ",\"trial\":{\"command\":[\"a\"],\"distributed\":{\"mode\":\"magic\"}}}", "trial.distributed.mode"},
    {"{\"name\":\"x\"," GOOD_OBJ "," GOOD_SR "," GOOD_HP
     ",\"trial\":{\"command\":[\"a\"],\"env\":{\"HYPERFARM_RANK\":\"3\"}}}", "trial.env.HYPERFARM_RANK"},
    {"{\"name\":\"x\"," GOOD_OBJ "," GOOD_SR "," GOOD_HP
     ",\"trial\":{\"command\":[\"a\"],\"env\":{\"PATH\":\"/x\"}}}", "trial.env.PATH"},
    {"{\"name\":\"x\"," GOOD_OBJ "," GOOD_SR "," GOOD_HP
     ",\"trial\":{\"command\":[\"a\"],\"env\":{\"bad name\":\"3\"}}}", "trial.env.bad name"},
    {"{\"name\":\"x\"," GOOD_OBJ "," GOOD_SR "," GOOD_HP "," GOOD_TR ",\"weight\":0}", "weight"},
    {"{\"name\":\"x\"," GOOD_OBJ "," GOOD_SR "," GOOD_HP "," GOOD_TR ",\"priority\":\"high\"}", "priority"},
    {"{\"name\":\"x\"," GOOD_OBJ "," GOOD_SR "," GOOD_HP "," GOOD_TR ",\"checkpoint_policy\":3}", "checkpoint_policy"},
    {"{\"name\":\"x\"," GOOD_OBJ "," GOOD_SR "," GOOD_HP "," GOOD_TR ",\"checkpoint_policy\":{\"keep_latest\":-1}}",
     "checkpoint_policy.keep_latest"},
    {"{\"name\":\"x\"," GOOD_OBJ "," GOOD_SR "," GOOD_HP "," GOOD_TR ",\"checkpoint_policy\":{\"keep_latest\":1.5}}",
     "checkpoint_policy.keep_latest"},
    {"{\"name\":\"x\"," GOOD_OBJ "," GOOD_SR "," GOOD_HP "," GOOD_TR
     ",\"checkpoint_policy\":{\"keep_best_trials\":\"all\"}}", "checkpoint_policy.keep_best_trials"},
    {"{\"name\":\"x\"," GOOD_OBJ "," GOOD_SR "," GOOD_HP "," GOOD_TR ",\"checkpoint_policy\":{\"keep_best\":2}}",
     "checkpoint_policy.keep_best"},
};

static void test_bad_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        json_t *j = json_loads(bad[i].json, JSON_DECODE_ANY, NULL);
        exp_spec sp;
        hf_jerr e;
        if (!j) fail_msg("case %zu: test JSON does not parse", i);
        int rc = experiment_parse(j, &sp, &e);
        if (rc != HF_EINVAL) fail_msg("case %zu (%s): accepted", i, bad[i].json);
        if (strcmp(e.field, bad[i].field) != 0)
            fail_msg("case %zu: field \"%s\" (%s), expected \"%s\"", i, e.field, e.msg, bad[i].field);
        assert_true(e.msg[0] != 0);
        json_decref(j);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good),
        cmocka_unit_test(test_seed_chosen_and_stored),
        cmocka_unit_test(test_checkpoint_policy),
        cmocka_unit_test(test_aggregate),
        cmocka_unit_test(test_metric_direction),
        cmocka_unit_test(test_bad_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
