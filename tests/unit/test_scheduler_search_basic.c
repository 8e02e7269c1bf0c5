/*
 * test_scheduler_search_basic.c — the registry, search_validate with field
 * paths, random and grid searchers (reproducible from (seed, index),
 * replay-safe), and the median stopping rule.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "hf_err.h"
#include "scheduler/search/search.h"
#include "scheduler/search/search_space.h"
#include "tests/unit/search_fixture.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static search_space *space(const char *s) { return space_of(s); }

static const char *SPACE =
    "{\"lr\": {\"type\": \"log\", \"min\": 1e-4, \"max\": 0.3},"
    " \"hidden\": {\"type\": \"int\", \"min\": 64, \"max\": 512},"
    " \"optimizer\": {\"type\": \"categorical\", \"values\": [\"sgd\", \"adam\"]}}";

static void test_registry(void **state)
{
    (void)state;
    const char *const *names = search_names();
    int n = 0, has_grid = 0, has_random = 0;
    for (; names[n]; n++) {
        const searcher_ops *ops = search_find(names[n]);
        assert_non_null(ops);
        assert_string_equal(ops->name, names[n]);
        assert_non_null(ops->create);
        assert_non_null(ops->next);
        assert_non_null(ops->on_report);
        if (!strcmp(names[n], "grid")) has_grid = 1;
        if (!strcmp(names[n], "random")) has_random = 1;
    }
    assert_true(has_grid && has_random);
    assert_null(search_find("simulated_annealing"));
    assert_null(search_find(NULL));
}

static void test_validate(void **state)
{
    (void)state;
    search_space *sp = space(SPACE);
    static const bad_searcher bad[] = {
        {"[]", "searcher"},
        {"{}", "searcher.name"},
        {"{\"name\": \"annealing\"}", "searcher.name"},
        {"{\"name\": \"random\", \"max_trials\": 0}", "searcher.max_trials"},
        {"{\"name\": \"random\", \"max_concurrent_trials\": -1}", "searcher.max_concurrent_trials"},
        {"{\"name\": \"random\", \"seed\": \"x\"}", "searcher.seed"},
        {"{\"name\": \"random\", \"max_epochs\": 0}", "searcher.max_epochs"},
        {"{\"name\": \"random\", \"reduction_factr\": 3}", "searcher.reduction_factr"},
        {"{\"name\": \"random\", \"median_stopping\": 1}", "searcher.median_stopping"},
        {"{\"name\": \"random\", \"median_stopping\": {\"min_trials\": 0}}", "searcher.median_stopping.min_trials"},
        {"{\"name\": \"random\", \"median_stopping\": {\"warmup_epochs\": -1}}", "searcher.median_stopping.warmup_epochs"},
        {"{\"name\": \"random\", \"median_stopping\": {\"patience\": 1}}", "searcher.median_stopping.patience"},
    };
    expect_refused(bad, sizeof bad / sizeof bad[0], sp);
    static const char *const good[] = {
        "{\"name\": \"random\", \"max_trials\": 10, \"seed\": 3, \"max_epochs\": 5,"
        " \"median_stopping\": {\"min_trials\": 3, \"warmup_epochs\": 1}}",
    };
    expect_accepted(good, sizeof good / sizeof good[0], sp);
    search_space_free(sp);

    /* A grid too large to enumerate is rejected. */
    sp = space("{\"a\": {\"type\": \"uniform\", \"min\": 0, \"max\": 1, \"count\": 10000},"
               " \"b\": {\"type\": \"uniform\", \"min\": 0, \"max\": 1, \"count\": 10000}}");
    json_t *c = load("{\"name\": \"grid\"}");
    hf_jerr e;
    assert_int_equal(search_validate(c, sp, &e), HF_EINVAL);
    assert_string_equal(e.field, "searcher.name");
    json_decref(c);
    search_space_free(sp);
}

static void test_random(void **state)
{
    (void)state;
    search_space *sp = space(SPACE);
    json_t *cfg = load("{\"name\": \"random\", \"max_trials\": 20}");
    const searcher_ops *ops = search_find("random");
    searcher *a = ops->create(cfg, sp, 1, 42);
    searcher *b = ops->create(cfg, sp, 1, 42);
    searcher *c = ops->create(cfg, sp, 1, 43);
    int differ = 0;
    for (int64_t n = 0; n < 20; n++) {
        search_new x = {0}, y = {0}, z = {0};
        assert_int_equal(ops->next(a, n, 0, &x), SEARCH_CREATE);
        /* b is asked out of order: trial n depends on n only. */
        assert_int_equal(ops->next(b, n, 5, &y), SEARCH_CREATE);
        assert_int_equal(ops->next(c, n, 0, &z), SEARCH_CREATE);
        assert_true(json_equal(x.hparams, y.hparams));
        if (!json_equal(x.hparams, z.hparams)) differ++;
        assert_int_equal(x.budget, 0);
        assert_int_equal(x.resume_trial, 0);
        ops->on_created(a, n + 1, n, x.hparams, 0, 0);
        assert_int_equal(ops->on_report(a, n + 1, 1, 0.5), SEARCH_CONTINUE);
        ops->on_done(a, n + 1, SEARCH_COMPLETED, 0.5);
        json_decref(x.hparams); json_decref(y.hparams); json_decref(z.hparams);
    }
    assert_int_equal(differ, 20);
    search_new x = {0};
    assert_int_equal(ops->next(a, 20, 0, &x), SEARCH_DONE);
    ops->destroy(a); ops->destroy(b); ops->destroy(c);
    json_decref(cfg);
    search_space_free(sp);
}

static void test_grid(void **state)
{
    (void)state;
    search_space *sp = space("{\"lr\": {\"type\": \"log\", \"min\": 0.001, \"max\": 0.1, \"count\": 3},"
                             " \"opt\": {\"type\": \"categorical\", \"values\": [\"sgd\", \"adam\"]}}");
    json_t *cfg = load("{\"name\": \"grid\"}");
    const searcher_ops *ops = search_find("grid");
    searcher *g = ops->create(cfg, sp, 1, 1);
    for (int64_t n = 0; n < 6; n++) {
        search_new x = {0};
        assert_int_equal(ops->next(g, n, 0, &x), SEARCH_CREATE);
        json_t *want = search_space_grid_point(sp, (uint64_t)n);
        assert_true(json_equal(x.hparams, want));
        json_decref(want);
        json_decref(x.hparams);
    }
    search_new x = {0};
    assert_int_equal(ops->next(g, 6, 0, &x), SEARCH_DONE);
    json_t *d = ops->describe(g);
    assert_int_equal(json_integer_value(json_object_get(d, "points")), 6);
    json_decref(d);
    ops->destroy(g);
    json_decref(cfg);
    /* max_trials cuts the grid short. */
    cfg = load("{\"name\": \"grid\", \"max_trials\": 4}");
    g = ops->create(cfg, sp, 1, 1);
    assert_int_equal(ops->next(g, 4, 0, &x), SEARCH_DONE);
    ops->destroy(g);
    json_decref(cfg);
    search_space_free(sp);
}

static void test_median(void **state)
{
    (void)state;
    json_t *cfg = load("{\"min_trials\": 3, \"warmup_epochs\": 1}");
    search_median *m = search_median_new(cfg);
    /* Three finished trials with curves 0.5.., 0.6.., 0.7.. */
    for (int t = 1; t <= 3; t++) {
        for (int ep = 1; ep <= 5; ep++)
            assert_int_equal(search_median_on_report(m, t, ep, 0.4 + 0.1 * t + 0.01 * ep), SEARCH_CONTINUE);
        search_median_on_done(m, t, SEARCH_COMPLETED);
    }
    /* A failed trial is not part of the reference. */
    search_median_on_report(m, 9, 2, 0.0);
    search_median_on_done(m, 9, SEARCH_FAILED);
    /* Trial 4 good: stays. Trial 5 bad: warmup epoch 1 is free, stopped at 2. */
    assert_int_equal(search_median_on_report(m, 4, 1, 0.65), SEARCH_CONTINUE);
    assert_int_equal(search_median_on_report(m, 4, 2, 0.66), SEARCH_CONTINUE);
    assert_int_equal(search_median_on_report(m, 5, 1, 0.1), SEARCH_CONTINUE);
    /* median of running avgs at epoch 2 is 0.615; best 0.6 < 0.615 */
    assert_int_equal(search_median_on_report(m, 5, 2, 0.6), SEARCH_STOP);
    assert_int_equal(search_median_on_report(m, 5, 3, 0.9), SEARCH_STOP);
    /* Best-so-far counts: trial 6 dips below later but its best is above. */
    assert_int_equal(search_median_on_report(m, 6, 2, 0.7), SEARCH_CONTINUE);
    assert_int_equal(search_median_on_report(m, 6, 3, 0.1), SEARCH_CONTINUE);
    search_median_free(m);

    /* Too few finished trials: never stops. */
    m = search_median_new(cfg);
    search_median_on_report(m, 1, 1, 0.9);
    search_median_on_report(m, 1, 2, 0.9);
    search_median_on_done(m, 1, SEARCH_COMPLETED);
    assert_int_equal(search_median_on_report(m, 2, 2, 0.0), SEARCH_CONTINUE);
    /* Many reports per trial: the coarsening keeps working. */
    for (int i = 0; i < 10000; i++) search_median_on_report(m, 3, i * 0.001, 0.5);
    search_median_free(m);
    search_median_free(NULL);
    json_decref(cfg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_registry),
        cmocka_unit_test(test_validate),
        cmocka_unit_test(test_random),
        cmocka_unit_test(test_grid),
        cmocka_unit_test(test_median),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
