/*
 * test_scheduler_search_pbt.c — PBT: validation, generation g member m is
 * trial g*P+m with budget (g+1)*interval, generations wait for the previous
 * one, the bottom quantile exploits (parent = a top trial, perturbed
 * hyperparameters) while the rest continue (parent = own previous segment),
 * the end after G generations, replay, and a simulated population whose
 * best member improves on the best of generation 0.
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

static search_space *space(void)
{
    return space_of("{\"lr\": {\"type\": \"log\", \"min\": 1e-4, \"max\": 1}, \"bs\": 64}");
}

static void test_validate(void **state)
{
    (void)state;
    search_space *sp = space();
    static const bad_searcher bad[] = {
        {"{\"name\": \"pbt\", \"population_size\": 1}", "searcher.population_size"},
        {"{\"name\": \"pbt\", \"perturb_interval\": 0}", "searcher.perturb_interval"},
        {"{\"name\": \"pbt\", \"quantile\": 0}", "searcher.quantile"},
        {"{\"name\": \"pbt\", \"quantile\": 0.75}", "searcher.quantile"},
        {"{\"name\": \"pbt\", \"resample_probability\": 2}", "searcher.resample_probability"},
        {"{\"name\": \"pbt\", \"population_size\": 8, \"max_trials\": 10}", "searcher.max_trials"},
        {"{\"name\": \"pbt\", \"perturb_interval\": 4, \"max_epochs\": 6}", "searcher.perturb_interval"},
        {"{\"name\": \"pbt\", \"brackets\": 2}", "searcher.brackets"},
    };
    expect_refused(bad, sizeof bad / sizeof bad[0], sp);
    static const char *const good[] = {
        "{\"name\": \"pbt\", \"population_size\": 4, \"perturb_interval\": 2, \"quantile\": 0.25,"
        " \"resample_probability\": 0.2, \"max_trials\": 40, \"max_epochs\": 20}",
    };
    expect_accepted(good, sizeof good / sizeof good[0], sp);
    search_space_free(sp);
}

/* The "training": value after the run grows with epochs and is best near
 * lr = 0.01; an exploited member inherits the parent's progress. */
static double value_of(double lr, double epochs)
{
    return (1 - exp(-epochs / 5)) * exp(-pow(log10(lr) + 2, 2) / 2);
}

typedef struct pbt_sim {
    int64_t id_of_index[256];
    double  epochs_of[256];      /* by trial id */
    json_t *log;
} pbt_sim;

/* Create and finish one whole generation. RET best value. */
static double run_generation(const searcher_ops *ops, searcher *s, pbt_sim *w, int64_t g, int64_t P,
                             int64_t interval, int check)
{
    int64_t ids[64], parents[64];
    double lrs[64];
    for (int64_t m = 0; m < P; m++) {
        int64_t n = g * P + m;
        search_new nw = {0};
        assert_int_equal(ops->next(s, n, m, &nw), SEARCH_CREATE);
        assert_int_equal(nw.budget, (g + 1) * interval);
        assert_int_equal(nw.resume_trial, 0);
        if (g == 0) assert_int_equal(nw.parent_trial, 0);
        else assert_true(nw.parent_trial > 0);
        ids[m] = 1000 + n;
        parents[m] = nw.parent_trial;
        lrs[m] = json_real_value(json_object_get(nw.hparams, "lr"));
        assert_int_equal(json_integer_value(json_object_get(nw.hparams, "bs")), 64);
        ops->on_created(s, ids[m], n, nw.hparams, nw.budget, nw.parent_trial);
        json_array_append_new(w->log, json_pack("{s:I, s:I, s:O, s:I, s:I}", "id", (json_int_t)ids[m], "index",
                                                (json_int_t)n, "hp", nw.hparams, "budget", (json_int_t)nw.budget,
                                                "parent", (json_int_t)nw.parent_trial));
        json_decref(nw.hparams);
        /* Generation g+1 cannot start before this one ends. */
        if (check && m == P - 1) {
            search_new x = {0};
            assert_int_equal(ops->next(s, n + 1, P, &x), SEARCH_WAIT);
        }
    }
    double best = -1;
    for (int64_t m = 0; m < P; m++) {
        double start = parents[m] ? w->epochs_of[parents[m] - 1000] : 0;
        w->epochs_of[ids[m] - 1000] = start + (double)interval;
        double v = value_of(lrs[m], start + (double)interval);
        if (v > best) best = v;
        assert_int_equal(ops->on_report(s, ids[m], start + (double)interval, v), SEARCH_CONTINUE);
        ops->on_done(s, ids[m], SEARCH_COMPLETED, v);
        json_t *ev = json_array_get(w->log, json_array_size(w->log) - (size_t)(P - m));
        json_object_set_new(ev, "value", json_real(v));
    }
    return best;
}

static void test_generations(void **state)
{
    (void)state;
    search_space *sp = space();
    const int64_t P = 8, I = 2;
    json_t *c = load("{\"name\": \"pbt\", \"population_size\": 8, \"perturb_interval\": 2, \"max_trials\": 80,"
                     " \"max_epochs\": 20, \"resample_probability\": 0.0}");
    const searcher_ops *ops = search_find("pbt");
    searcher *s = ops->create(c, sp, 1, 3);
    pbt_sim w = {.log = json_array()};
    double best0 = run_generation(ops, s, &w, 0, P, I, 1), best = best0;
    /* Generation 1 by hand: ranking of gen 0, bottom 2 exploit the top 2. */
    json_t *gen0 = json_array();
    for (size_t i = 0; i < 8; i++) json_array_append(gen0, json_array_get(w.log, i));
    int exploited = 0;
    for (int64_t g = 1; g < 10; g++) {
        size_t base = json_array_size(w.log);
        double b = run_generation(ops, s, &w, g, P, I, g < 9);
        if (b > best) best = b;
        for (int64_t m = 0; m < P; m++) {
            json_t *ev = json_array_get(w.log, base + (size_t)m);
            json_t *prev = json_array_get(w.log, base - (size_t)P + (size_t)m);
            int64_t parent = json_integer_value(json_object_get(ev, "parent"));
            if (parent == json_integer_value(json_object_get(prev, "id"))) {
                assert_true(json_equal(json_object_get(ev, "hp"), json_object_get(prev, "hp")));
            } else {
                exploited++;
                /* parent from the previous generation; lr moved by 0.8 or 1.2 */
                json_t *src = NULL;
                for (size_t q = base - (size_t)P; q < base; q++)
                    if (json_integer_value(json_object_get(json_array_get(w.log, q), "id")) == parent)
                        src = json_array_get(w.log, q);
                assert_non_null(src);
                assert_true(json_real_value(json_object_get(src, "value")) >=
                            json_real_value(json_object_get(prev, "value")));
                double r = json_real_value(json_object_get(json_object_get(ev, "hp"), "lr")) /
                           json_real_value(json_object_get(json_object_get(src, "hp"), "lr"));
                double lr = json_real_value(json_object_get(json_object_get(ev, "hp"), "lr"));
                assert_true(fabs(r - 0.8) < 1e-9 || fabs(r - 1.2) < 1e-9 || lr == 1e-4 || lr == 1.0);
            }
        }
        if (g == 1) {
            int n_ex = 0;
            for (int64_t m = 0; m < P; m++) {
                json_t *ev = json_array_get(w.log, base + (size_t)m);
                json_t *prev = json_array_get(w.log, base - (size_t)P + (size_t)m);
                if (json_integer_value(json_object_get(ev, "parent")) != json_integer_value(json_object_get(prev, "id")))
                    n_ex++;
            }
            assert_int_equal(n_ex, 2);    /* floor(8 * 0.25) */
        }
    }
    assert_int_equal(exploited, 9 * 2);
    search_new x = {0};
    assert_int_equal(ops->next(s, 80, 0, &x), SEARCH_DONE);
    assert_true(best > best0);
    json_t *d = ops->describe(s);
    assert_int_equal(json_array_size(json_object_get(d, "generations")), 10);
    json_decref(d);

    /* Replay: rebuild from the log, the describe views agree and the next
     * decision (at the end: DONE; mid-run checked below) matches. */
    searcher *re = ops->create(c, sp, 1, 3);
    size_t i; json_t *ev;
    json_array_foreach(w.log, i, ev)
        ops->on_created(re, json_integer_value(json_object_get(ev, "id")), json_integer_value(json_object_get(ev, "index")),
                        json_object_get(ev, "hp"), json_integer_value(json_object_get(ev, "budget")),
                        json_integer_value(json_object_get(ev, "parent")));
    json_array_foreach(w.log, i, ev) {
        ops->on_report(re, json_integer_value(json_object_get(ev, "id")), 1, json_real_value(json_object_get(ev, "value")));
        ops->on_done(re, json_integer_value(json_object_get(ev, "id")), SEARCH_COMPLETED,
                     json_real_value(json_object_get(ev, "value")));
    }
    json_t *d1 = ops->describe(s), *d2 = ops->describe(re);
    assert_true(json_equal(d1, d2));
    json_decref(d1); json_decref(d2);
    ops->destroy(re);
    ops->destroy(s);
    json_decref(gen0);
    json_decref(w.log);
    json_decref(c);
    search_space_free(sp);
}

/* Mid-run replay: after generation 2, a rebuilt searcher proposes the
 * same generation 3 (parents and hyperparameters). */
static void test_replay_next(void **state)
{
    (void)state;
    search_space *sp = space();
    json_t *c = load("{\"name\": \"pbt\", \"population_size\": 6, \"max_trials\": 60}");
    const searcher_ops *ops = search_find("pbt");
    searcher *s = ops->create(c, sp, 1, 8);
    pbt_sim w = {.log = json_array()};
    for (int64_t g = 0; g < 3; g++) run_generation(ops, s, &w, g, 6, 1, 0);
    searcher *re = ops->create(c, sp, 1, 8);
    size_t i; json_t *ev;
    json_array_foreach(w.log, i, ev)
        ops->on_created(re, json_integer_value(json_object_get(ev, "id")), json_integer_value(json_object_get(ev, "index")),
                        json_object_get(ev, "hp"), json_integer_value(json_object_get(ev, "budget")),
                        json_integer_value(json_object_get(ev, "parent")));
    for (size_t k = json_array_size(w.log); k-- > 0;) {    /* reverse order */
        ev = json_array_get(w.log, k);
        ops->on_done(re, json_integer_value(json_object_get(ev, "id")), SEARCH_COMPLETED,
                     json_real_value(json_object_get(ev, "value")));
    }
    for (int64_t m = 0; m < 6; m++) {
        search_new a = {0}, b = {0};
        assert_int_equal(ops->next(s, 18 + m, m, &a), SEARCH_CREATE);
        assert_int_equal(ops->next(re, 18 + m, m, &b), SEARCH_CREATE);
        assert_int_equal(a.parent_trial, b.parent_trial);
        assert_int_equal(a.budget, b.budget);
        assert_true(json_equal(a.hparams, b.hparams));
        json_decref(a.hparams); json_decref(b.hparams);
    }
    ops->destroy(s); ops->destroy(re);
    json_decref(w.log);
    json_decref(c);
    search_space_free(sp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_validate),
        cmocka_unit_test(test_generations),
        cmocka_unit_test(test_replay_next),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
