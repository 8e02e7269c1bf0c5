/*
 * test_scheduler_search_tpe.c — TPE: config validation with field paths,
 * startup equals random search, the model concentrates on good regions
 * (numeric, log, categorical, conditional), and a searcher rebuilt by
 * replay makes exactly the same next decisions as the one that lived.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "hf_err.h"
#include "scheduler/search.h"
#include "scheduler/search_space.h"
#include "tests/unit/search_fixture.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static search_space *space(const char *s) { return space_of(s); }

static const char *SPACE =
    "{\"lr\": {\"type\": \"log\", \"min\": 1e-5, \"max\": 1},"
    " \"h\": {\"type\": \"int\", \"min\": 1, \"max\": 64},"
    " \"opt\": {\"type\": \"categorical\", \"values\": [\"sgd\", \"adam\", \"rmsprop\"]},"
    " \"mom\": {\"type\": \"uniform\", \"min\": 0, \"max\": 1,"
    "   \"condition\": {\"param\": \"opt\", \"values\": [\"sgd\"]}}}";

/* Objective: best at lr = 1e-2, h = 48, opt = adam; mom matters for sgd. */
static double objective(const json_t *hp)
{
    double lr = json_real_value(json_object_get(hp, "lr"));
    double h = (double)json_integer_value(json_object_get(hp, "h"));
    const char *opt = json_string_value(json_object_get(hp, "opt"));
    double v = -pow(log10(lr) + 2, 2) - pow((h - 48) / 32, 2);
    if (!strcmp(opt, "adam")) v += 0.5;
    else if (!strcmp(opt, "sgd")) v -= fabs(json_real_value(json_object_get(hp, "mom")) - 0.9);
    return v;
}

static void test_validate(void **state)
{
    (void)state;
    search_space *sp = space(SPACE);
    static const bad_searcher bad[] = {
        {"{\"name\": \"tpe\", \"n_startup_trials\": 0}", "searcher.n_startup_trials"},
        {"{\"name\": \"tpe\", \"gamma\": 0}", "searcher.gamma"},
        {"{\"name\": \"tpe\", \"gamma\": 1.5}", "searcher.gamma"},
        {"{\"name\": \"tpe\", \"n_ei_candidates\": 0}", "searcher.n_ei_candidates"},
        {"{\"name\": \"tpe\", \"prior_weight\": 0}", "searcher.prior_weight"},
        {"{\"name\": \"tpe\", \"reduction_factor\": 3}", "searcher.reduction_factor"},
        {"{\"name\": \"tpe\", \"constant_liar\": 1}", "searcher.constant_liar"},
    };
    expect_refused(bad, sizeof bad / sizeof bad[0], sp);
    json_t *c = load("{\"name\": \"tpe\", \"n_startup_trials\": 5, \"gamma\": 0.2, \"n_ei_candidates\": 32,"
                     " \"prior_weight\": 1.0, \"max_trials\": 10}");
    hf_jerr e;
    assert_int_equal(search_validate(c, sp, &e), 0);
    json_decref(c);
    search_space_free(sp);
}

/* Drive a searcher for n trials sequentially; RET mean objective of the
 * last `tail` trials. */
static double drive(searcher *s, const searcher_ops *ops, int n, int tail, int *n_adam_tail)
{
    double sum = 0;
    for (int k = 0; k < n; k++) {
        search_new nw = {0};
        assert_int_equal(ops->next(s, k, 0, &nw), SEARCH_CREATE);
        /* Conditional parameter present exactly when active. */
        const char *opt = json_string_value(json_object_get(nw.hparams, "opt"));
        assert_non_null(opt);
        assert_int_equal(json_object_get(nw.hparams, "mom") != NULL, strcmp(opt, "sgd") == 0);
        double y = objective(nw.hparams);
        ops->on_created(s, 100 + k, k, nw.hparams, 0, 0);
        ops->on_report(s, 100 + k, 1, y);
        ops->on_done(s, 100 + k, SEARCH_COMPLETED, y);
        if (k >= n - tail) {
            sum += y;
            if (n_adam_tail && !strcmp(opt, "adam")) (*n_adam_tail)++;
        }
        json_decref(nw.hparams);
    }
    return sum / tail;
}

static void test_startup_is_random(void **state)
{
    (void)state;
    search_space *sp = space(SPACE);
    json_t *ct = load("{\"name\": \"tpe\", \"n_startup_trials\": 4}");
    json_t *cr = load("{\"name\": \"random\"}");
    const searcher_ops *tpe = search_find("tpe"), *rnd = search_find("random");
    searcher *t = tpe->create(ct, sp, 1, 9), *r = rnd->create(cr, sp, 1, 9);
    for (int k = 0; k < 4; k++) {
        search_new a = {0}, b = {0};
        tpe->next(t, k, 0, &a);
        rnd->next(r, k, 0, &b);
        assert_true(json_equal(a.hparams, b.hparams));
        tpe->on_created(t, k + 1, k, a.hparams, 0, 0);
        tpe->on_done(t, k + 1, SEARCH_COMPLETED, objective(a.hparams));
        json_decref(a.hparams); json_decref(b.hparams);
    }
    /* After startup the model takes over: no longer the random point. */
    int differ = 0;
    for (int k = 4; k < 8; k++) {
        search_new a = {0}, b = {0};
        tpe->next(t, k, 0, &a);
        rnd->next(r, k, 0, &b);
        differ += !json_equal(a.hparams, b.hparams);
        json_decref(a.hparams); json_decref(b.hparams);
    }
    assert_true(differ >= 3);
    json_t *d = tpe->describe(t);
    assert_int_equal(json_integer_value(json_object_get(d, "observations")), 4);
    assert_true(json_is_true(json_object_get(d, "model")));
    json_decref(d);
    tpe->destroy(t); rnd->destroy(r);
    json_decref(ct); json_decref(cr);
    search_space_free(sp);
}

static void test_beats_random(void **state)
{
    (void)state;
    search_space *sp = space(SPACE);
    json_t *ct = load("{\"name\": \"tpe\"}");
    json_t *cr = load("{\"name\": \"random\"}");
    const searcher_ops *tpe = search_find("tpe"), *rnd = search_find("random");
    int tpe_better = 0, adam_t = 0, adam_r = 0;
    for (uint64_t seed = 0; seed < 5; seed++) {
        searcher *t = tpe->create(ct, sp, 1, seed), *r = rnd->create(cr, sp, 1, seed);
        double mt = drive(t, tpe, 60, 30, &adam_t);
        double mr = drive(r, rnd, 60, 30, &adam_r);
        if (mt > mr) tpe_better++;
        tpe->destroy(t); rnd->destroy(r);
    }
    /* The late TPE trials are better on average and favour "adam". */
    assert_true(tpe_better >= 4);
    assert_true(adam_t > adam_r + 20);
    json_decref(ct); json_decref(cr);
    search_space_free(sp);
}

/* Live: reports and ends arrive interleaved, 4 trials in flight, a failed
 * and a canceled trial among them. Replay: on_created in creation order,
 * then each trial's reports, then its end. The next decisions must agree. */
static void test_replay(void **state)
{
    (void)state;
    search_space *sp = space(SPACE);
    json_t *cfg = load("{\"name\": \"tpe\", \"n_startup_trials\": 5}");
    const searcher_ops *ops = search_find("tpe");
    searcher *live = ops->create(cfg, sp, 1, 77);
    json_t *hps = json_array();
    int outcome[30];
    double val[30];
    for (int k = 0; k < 30; k++) {
        search_new nw = {0};
        assert_int_equal(ops->next(live, k, k >= 4 ? 4 : k, &nw), SEARCH_CREATE);
        ops->on_created(live, 500 + k, k, nw.hparams, 0, 0);
        json_array_append_new(hps, nw.hparams);
        val[k] = objective(nw.hparams);
        outcome[k] = k % 11 == 3 ? SEARCH_FAILED : k % 13 == 5 ? SEARCH_CANCELED : SEARCH_COMPLETED;
        if (k >= 3) {               /* trial k-3 finishes now (4 in flight) */
            int j = k - 3;
            ops->on_report(live, 500 + j, 1, val[j] - 0.1);
            ops->on_report(live, 500 + j, 2, val[j]);
            ops->on_done(live, 500 + j, outcome[j], outcome[j] == SEARCH_COMPLETED ? val[j] : NAN);
        }
    }
    searcher *re = ops->create(cfg, sp, 1, 77);
    for (int k = 0; k < 30; k++)
        ops->on_created(re, 500 + k, k, json_array_get(hps, (size_t)k), 0, 0);
    for (int j = 26; j >= 0; j--) {     /* ends replayed in another order */
        ops->on_report(re, 500 + j, 1, val[j] - 0.1);
        ops->on_report(re, 500 + j, 2, val[j]);
        ops->on_done(re, 500 + j, outcome[j], outcome[j] == SEARCH_COMPLETED ? val[j] : NAN);
    }
    for (int k = 30; k < 36; k++) {
        search_new a = {0}, b = {0};
        assert_int_equal(ops->next(live, k, 3, &a), SEARCH_CREATE);
        assert_int_equal(ops->next(re, k, 3, &b), SEARCH_CREATE);
        assert_true(json_equal(a.hparams, b.hparams));
        json_decref(a.hparams); json_decref(b.hparams);
    }
    ops->destroy(live); ops->destroy(re);
    json_decref(hps);
    json_decref(cfg);
    search_space_free(sp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_validate),
        cmocka_unit_test(test_startup_is_random),
        cmocka_unit_test(test_beats_random),
        cmocka_unit_test(test_replay),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
